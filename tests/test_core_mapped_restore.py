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


def test_a_storage_not_aligned_as_its_allocator_aligns_is_copied_out_of_the_mapping(tmp_path):
    """NumPy's memory is on 16 bytes (malloc's), torch's on 64 (``HOST_ALIGNMENT``): an entry
    elsewhere, even one aligned for its dtype, is copied into memory of its allocator."""
    data = np.arange(1024, dtype=np.float64)
    path = tmp_path / "blob"
    path.write_bytes(b"prefix: sixteen!" + data.tobytes())
    ref = StorageRef(blob="b", entry=0, nbytes=data.nbytes, dtype="float64", device="cpu",
                     kind="numpy", owner="data")
    with open(path, "rb") as f:
        mapping = map_private(f, 16 + data.nbytes)
    for offset in (4, 8):  # not a whole float64 from the page's start; a float64 off 16 bytes
        copied = _allocate(ref, over=(mapping, offset))
        assert copied.dtype == np.float64 and copied.ctypes.data % 16 == 0
        assert copied.tobytes() == bytes(mapping[offset:offset + data.nbytes])
        copied[0] = 7.0
        assert bytes(mapping[offset:offset + 8]) == path.read_bytes()[offset:offset + 8], \
            "a copy, not the mapping"
    served = _allocate(ref, over=(mapping, 16))
    assert np.array_equal(served, data) and served.flags.writeable
    served[0] = 7.0
    assert mapping[16:24] == np.float64(7.0).tobytes(), "over the mapping"
    assert path.read_bytes()[16:24] == data[:1].tobytes(), "the file never changes"
    tensor = StorageRef(blob="b", entry=0, nbytes=data.nbytes, dtype="float64", device="cpu",
                        kind="torch", owner="t")
    assert _allocate(tensor, over=(mapping, 16)).data_ptr() % 64 == 0  # a copy: torch's 64


def test_restored_memory_is_aligned_as_its_allocator_aligns_it(tmp_path):
    """torch's CPU allocator aligns every storage to 64 bytes (c10/core/alignment.h,
    ``gAlignment``), malloc every NumPy array to 16. A storage served over a mapped blob
    started where its entry lay in the file: the header was padded to 8 bytes only, so a tensor
    could start 8 bytes off a 16-byte boundary, and MKL's kernels then round differently: the
    nn tutorial's logistic regression (``xb.T @ grad`` in backward, batches sliced from the
    restored ``x_train``) trained to another loss after the resume, under ``exact``. Blobs'
    data now start on a 64-byte boundary, and a storage whose entry is not so aligned (a pack
    of small ones, a blob written before) is copied into memory of its allocator."""
    import torch
    import torch.nn.functional as F
    from fixtures_kernels import resumed_in_process

    rs = np.random.RandomState(0)
    namespace = {f"t{i}": torch.tensor(rs.rand(2000 + 37 * i, 131).astype("float32"))
                 for i in range(8)}  # headers of different lengths: entries at many offsets
    namespace |= {f"a{i}": rs.rand(1 << 17 + i) for i in range(3)}
    namespace["y"] = torch.tensor(rs.randint(0, 10, 2000))
    # one pack of small storages (one owner), sizes of whole 64-byte blocks or not, in turn
    namespace["layers"] = [torch.randn(16383 + 16385 * (i % 2)) for i in range(16)]  # 1.5 MiB
    restored = resumed_in_process(namespace, tmp_path)
    tensors = [restored[n] for n in namespace if n[0] in "ty"] + restored["layers"]
    assert [t.data_ptr() % 64 for t in tensors] == [0] * len(tensors)
    assert all(restored[f"a{i}"].ctypes.data % 16 == 0 for i in range(3))
    exec(MAPPED_FILE, globals())
    over_blobs = [mapped_file(t.data_ptr()).endswith(".safetensors")  # noqa: F821
                  for t in restored["layers"]]
    assert all(over_blobs[1::2]), "whole blocks come first in the pack: each is mapped"
    assert sum(over_blobs[::2]) == 1, "of the others, the first starts on a block: mapped"

    def train(x, y):
        torch.manual_seed(1)
        model = torch.nn.Linear(131, 10)
        for i in range(0, 1920, 64):
            F.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= p.grad * 0.5
                model.zero_grad()
        return model.weight

    for name in ("t0", "t3", "t7"):
        assert torch.equal(train(restored[name], restored["y"]), train(namespace[name], namespace["y"]))
