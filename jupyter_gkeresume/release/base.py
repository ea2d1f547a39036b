"""The release backend interface (see the package docstring for when it is called)."""

from __future__ import annotations

from typing import ClassVar

from traitlets.config import LoggingConfigurable


class ReleaseBackend(LoggingConfigurable):
    """Gives the pod (or, for ``none``, nothing beyond the kernels) back to the cluster."""

    name: ClassVar[str] = "base"
    releases_pod: ClassVar[bool] = True
    """True when releasing gives the pod or server back (``none`` frees nothing beyond the
    kernels): an idle workspace without kernels is released only then, and the doctor says
    whether anything will ever give the GPU back. Every pause takes every kernel either way."""

    async def release(self) -> None:
        """Release the server's resources; raise ``ReleaseError`` when that is not possible.

        May not return for backends that stop this very server (the process is terminated).
        """
        raise NotImplementedError

    async def may_release(self) -> tuple[bool, str]:
        """Whether ``release`` would be allowed, and the evidence, found without releasing
        anything; raise ``ReleaseError`` when that cannot be found out (no credentials, no
        answer)."""
        raise NotImplementedError
