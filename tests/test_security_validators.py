"""Full-match validation everywhere (issue 13.7): ``^...$`` accepts a trailing newline, so a pause
named ``"ok\\n"`` was accepted and split the CLI's output. Every validator gets a valid value
(accepted) and the same value with a trailing newline (refused)."""

from __future__ import annotations

import pytest

from jupyter_gkeresume.errors import InvalidInputError, StoredRecordError
from jupyter_gkeresume.paused_record import safe_notebook_path
from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.digests import validate_digest
from jupyter_gkeresume.snapshot.fingerprint import _RELEASE_RE
from jupyter_gkeresume.snapshot.format import validate_snapshot_id, validate_snapshot_name
from jupyter_gkeresume.snapshot.lease import RestoreLease
from jupyter_gkeresume.workspace import validate_workspace_id
from kernel_hooks.cuda_arrays import dtype_name
from kernel_hooks.cuda_plan import cuda_index


def refuses(check, error: type[Exception] = InvalidInputError):
    def run(value):
        try:
            check(value)
        except error:
            return False
        return True
    return run


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(str(tmp_path), "ws")


def validators(store):
    return {
        "snapshot id": (refuses(validate_snapshot_id), "20261130T101500Z-a1b2c3"),
        "snapshot name": (refuses(validate_snapshot_name), "ok"),
        "sha256 digest": (refuses(validate_digest), "ab" * 32),
        "blake3 digest": (refuses(validate_digest), "b3-" + "ab" * 32),
        "workspace id": (refuses(validate_workspace_id), "hub-alice"),
        "lease key": (refuses(lambda k: RestoreLease(store, k)), "kernel-1"),
        "record name": (refuses(lambda n: store.record_path(n)), "lease-kernel-1"),
        "notebook path": (refuses(safe_notebook_path, StoredRecordError), "work/train.ipynb"),
        "cuda typestr": (refuses(dtype_name), "<f4"),
        "cuda device": (lambda d: cuda_index(d) is not None, "cuda:0"),
        "driver release": (lambda line: _RELEASE_RE.match(line) is not None, "550.54.15"),
    }


@pytest.mark.parametrize("which", list(validators(None)))
def test_a_trailing_newline_is_refused(store, which):
    accepts, valid = validators(store)[which]
    assert accepts(valid)
    for bad in (valid + "\n", valid + "\r\n", "\n" + valid):
        assert not accepts(bad), repr(bad)
