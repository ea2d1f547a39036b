"""Errors only the kernel side raises; all are ``GkeResumeError`` subclasses (the root)."""

from __future__ import annotations

from jupyter_gkeresume.errors import GkeResumeError, SnapshotNotFoundError
from jupyter_gkeresume.printable import printable


class CudaError(GkeResumeError):
    """The CUDA driver refused a transfer (bad pointer, device lost, out of pinned memory)."""


class CudaOutOfMemoryError(CudaError):
    """The GPU has not enough free memory for an allocation (CUDA_ERROR_OUT_OF_MEMORY)."""


class NoNotebookSnapshotError(SnapshotNotFoundError):
    """No signed snapshot of this notebook (None: of any notebook) to restore; ``%resume``
    without an id looks only at this notebook's."""

    def __init__(self, notebook: str | None, known: list[str], newest_other: tuple[str, str] | None,
                 newest_refused: tuple[str, str] | None):
        self.reference, self.known, self.notebook = "latest", known, notebook
        message = f"no snapshot of {notebook or 'any notebook'} in this workspace"
        if newest_refused is not None:
            snapshot_id, why = newest_refused
            message += f" whose signature verifies (newest refused: {snapshot_id}: {why})"
        if newest_other is not None:
            snapshot_id, other = newest_other
            message += (f"; the newest of another notebook is {snapshot_id} ({other}): "
                        "`%resume latest --any` restores it")
        GkeResumeError.__init__(self, message)


class OtherNotebookError(GkeResumeError):
    """The snapshot asked for was taken in another notebook than the one it would restore into
    (its manifest's signed ``notebook``); ``--any`` (``any_notebook``) asks for it explicitly."""

    def __init__(self, snapshot_id: str, taken_in: str, into: str):
        self.snapshot_id, self.taken_in, self.into = snapshot_id, taken_in, into
        super().__init__(f"snapshot {snapshot_id} was taken in {printable(taken_in)}, not in "
                         f"{printable(into)}: `%resume {snapshot_id} --any` restores it here "
                         "anyway")
