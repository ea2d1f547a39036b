"""A resume from a local store serves big storages over a private mapping of their blob files
(``loader.StorageLoader._map``): verified first, copied on write, the store never changed.

Real kernels and real files, on disk and on tmpfs (where the mapping is the file's own pages,
which is why the restore costs no copy there: issue 31, item 5)."""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from fixtures_kernels import MAPPED_FILE

from jupyter_gkeresume.errors import IntegrityError
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for, verify_mapped
from jupyter_gkeresume.snapshot.digests import algorithm_of
from jupyter_gkeresume.snapshot.format import StorageRef
from kernel_hooks.loader import _allocate
from kernel_hooks.memory import map_private

SESSION = (
    "import torch, numpy as np\n"
    "w = torch.randn(1 << 19)\n"            # 2 MiB: a blob of its own
    "view = w[10:20]\n"
    "arr = np.random.rand(1 << 18)\n"       # 2 MiB of float64
    "twin_a = torch.ones(1 << 19)\n"        # equal bytes: one blob entry, two storages
    "twin_b = torch.ones(1 << 19)\n"
    "small = torch.arange(10.)\n"
)
FACTS = ("import json\n"
         "print(json.dumps([float(w.double().sum()), float(arr.sum()), float(view.sum()),"
         " float(twin_a.sum()), float(twin_b.sum()), float(small.sum())]))")


@pytest.fixture(params=["disk", "tmpfs"])
def store_dir(request, tmp_path):
    if request.param == "disk":
        yield tmp_path / "store"
        return
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="gkeresume-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def blob_files(store: Path) -> list[Path]:
    return [p for p in (store / "test-ws" / "blobs").rglob("*.safetensors")]


def test_a_resumed_session_runs_over_its_mapped_blobs_and_never_writes_them(start_kernel,
                                                                          store_dir):
    store_dir.mkdir(exist_ok=True, mode=0o700)
    env = {"GKERESUME_STORE": str(store_dir)}
    first = start_kernel(env)
    first.run(SESSION)
    before = first.run_json(FACTS)
    first.run("%checkpoint -n one")

    second = start_kernel(env)
    second.run("%resume one")
    assert second.run_json(FACTS) == before
    second.run(MAPPED_FILE)
    where = second.run_json(
        "print(json.dumps([mapped_file(w.data_ptr()), mapped_file(arr.ctypes.data),"
        " mapped_file(twin_a.data_ptr()), mapped_file(twin_b.data_ptr()),"
        " view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()]))")
    blobs = {str(p) for p in blob_files(store_dir)}
    assert where[0] in blobs and where[1] in blobs, "the big storages are served over their blobs"
    assert where[0] != where[1]
    assert (where[2] in blobs) != (where[3] in blobs), "one twin over the blob, one a copy"
    assert where[4] is True, "a view still shares its tensor's storage"

    second.run("w[0] = 42.0\narr[0] = 42.0\ntwin_a[0] = 5.0\nview[0] += 1")
    changed = second.run_json(FACTS)
    assert changed[3] == before[3] + 4 and changed[4] == before[4], "the twins stay apart"
    for blob in blob_files(store_dir):  # copy on write: no stored byte moved
        data = blob.read_bytes()
        name = blob.name.removesuffix(".safetensors")
        assert algorithm_of(name).of([data], len(data)) == name, blob

    reused = second.run_json("import kernel_hooks\nr = kernel_hooks.checkpoint('two')\n"
                             "print(json.dumps([r.bytes_new, r.bytes_reused]))")
    assert reused[0] >= 3 * (2 << 20), "w, arr and twin_a changed: written again"
    assert reused[1] >= 2 << 20, "twin_b did not: its blob is reused"

    third = start_kernel(env)
    third.run("%resume two")
    assert third.run_json(FACTS) == changed
    for blob in blob_files(store_dir):  # gc may delete what a live session maps
        blob.unlink()
    assert second.run_json(FACTS) == third.run_json(FACTS) == changed


def test_map_private_takes_only_a_whole_local_regular_file(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 64)
    with open(path, "rb") as f:
        mapping = map_private(f, 256 * 64)
        assert mapping is not None and mapping[:3] == b"\x00\x01\x02"
        mapping[0] = 9  # a private copy of the page
        assert map_private(f, 100) is None, "a size that is not the file's"
    assert path.read_bytes()[0] == 0
    assert map_private(io.BytesIO(b"x" * 4096), 4096) is None
    with open("/dev/null", "rb") as f:
        assert map_private(f, 0) is None


def test_verify_mapped_checks_the_bytes_it_will_serve(tmp_path):
    payload = np.arange(1 << 16, dtype=np.float32)
    layout = layout_for([("float32", payload.nbytes)])
    digest = blob_digest(layout, [payload])
    path = tmp_path / "blob"
    path.write_bytes(layout.header + payload.tobytes())
    with open(path, "rb") as f:
        mapping = map_private(f, layout.size)
        assert verify_mapped(f, digest, layout.size, memoryview(mapping)) == layout
        mapping[layout.entry_offsets[0]] ^= 1  # what the mapping serves differs from the file
        f.seek(0)
        with pytest.raises(IntegrityError, match="does not match its digest"):
            verify_mapped(f, digest, layout.size, memoryview(mapping))


def test_a_storage_not_aligned_for_its_dtype_is_copied_out_of_the_mapping(tmp_path):
    data = np.arange(1024, dtype=np.float64)
    path = tmp_path / "blob"
    path.write_bytes(b"prefix:8" + data.tobytes())
    ref = StorageRef(blob="b", entry=0, nbytes=data.nbytes, dtype="float64", device="cpu",
                     kind="numpy", owner="data")
    with open(path, "rb") as f:
        mapping = map_private(f, 8 + data.nbytes)
    copied = _allocate(ref, over=(mapping, 4))  # not a whole float64 from the page's start
    assert copied.dtype == np.float64 and copied.tobytes() == bytes(mapping[4:4 + data.nbytes])
    copied[0] = 7.0
    assert bytes(mapping[4:12]) == path.read_bytes()[4:12], "a copy, not the mapping"
    served = _allocate(ref, over=(mapping, 8))
    assert np.array_equal(served, data) and served.flags.writeable
    served[0] = 7.0
    assert mapping[8:16] == np.float64(7.0).tobytes(), "over the mapping"
    assert path.read_bytes()[8:16] == data[:1].tobytes(), "the file never changes"
