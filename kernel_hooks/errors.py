"""Errors only the kernel side raises; all are ``GkeResumeError`` subclasses (the root)."""

from __future__ import annotations

from jupyter_gkeresume.errors import GkeResumeError, SnapshotNotFoundError


class CudaError(GkeResumeError):
    """The CUDA driver refused a transfer (bad pointer, device lost, out of pinned memory)."""


class CudaOutOfMemoryError(CudaError):
    """The GPU has not enough free memory for an allocation (CUDA_ERROR_OUT_OF_MEMORY)."""


class NoNotebookSnapshotError(SnapshotNotFoundError):
    """This notebook has no restorable snapshot (``%resume`` without an id looks only at it)."""

    def __init__(self, notebook: str, known: list[str], newest_other: tuple[str, str] | None):
        self.reference, self.known, self.notebook = "latest", known, notebook
        message = f"no snapshot of {notebook} in this workspace"
        if newest_other is not None:
            snapshot_id, other = newest_other
            message += (f"; the newest of another notebook is {snapshot_id} ({other}): "
                        "`%resume latest --any` restores it")
        GkeResumeError.__init__(self, message)
