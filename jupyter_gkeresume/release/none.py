"""``none``: nothing beyond the kernels is released; the server keeps running."""

from __future__ import annotations

from .base import ReleaseBackend


class NoRelease(ReleaseBackend):
    """Local use: the orchestrator shuts the paused kernels down (their GPU memory is freed)."""

    name = "none"
    releases_pod = False

    async def release(self) -> None:
        self.log.info("gkeresume: release backend 'none': only the kernels stop")

    async def may_release(self) -> tuple[bool, str]:
        return True, "nothing beyond the kernels is released: the server keeps running"
