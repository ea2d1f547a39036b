"""The unchanged second checkpoint does not read a big host storage again where the page tables
show that nothing wrote it (``kernel_hooks.written_pages``, issue 31), and never serves an old key
for bytes that changed, however they changed: every way of writing below must be seen.

Linux facts relied on (``Documentation/admin-guide/mm/userfaultfd.rst`` and ``pagemap.rst``,
torvalds/linux): with ``UFFD_FEATURE_WP_ASYNC`` a write to a protected page is resolved by the
kernel, which clears the page's protection; ``PAGEMAP_SCAN`` reports a page without it as
``PAGE_IS_WRITTEN``, a page of memory not registered so as written too, and shared memory's pages
as ``PAGE_IS_FILE``."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import types
from collections import OrderedDict

import numpy as np
import pytest
import torch
import xxhash

from kernel_hooks import blobwriter, written_pages

needs_tracking = pytest.mark.skipif(written_pages.tracker() is None,
                                    reason="this kernel has no asynchronous write protection")
MIB = 1 << 20


@pytest.fixture
def hashed(monkeypatch):
    """The sizes of the buffers blobwriter hashes (its xxh3 calls, counted), with the tracker's
    record of earlier tests' storages set aside (a new array may take a dead one's address:
    then it counts as that storage, written since)."""
    pages = written_pages.tracker()
    if pages is not None:
        monkeypatch.setattr(pages, "_entries", OrderedDict())
        pages.new_checkpoint()  # as a checkpoint does once its storages are allocated
    sizes: list[int] = []

    def digest(view):
        sizes.append(len(view))
        return xxhash.xxh3_128_digest(view)

    monkeypatch.setattr(blobwriter, "xxhash", types.SimpleNamespace(
        xxh3_128_digest=digest, xxh3_128=xxhash.xxh3_128))
    return sizes


def key_of(array: np.ndarray) -> bytes:
    return blobwriter._content_key(memoryview(array).cast("B"), array.ctypes.data)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _write_middle(a):
    a[len(a) // 2] += 1.0


def _write_first_partial_page(a):
    a[0] += 1.0  # numpy's data do not start on a page: this page is shared, never protected


def _write_last_partial_page(a):
    a[-1] += 1.0


def _write_through_torch_data(a):
    t = torch.from_numpy(a)
    t.data[len(a) // 3] += 1.0  # torch's version counter does not see this one


def _write_by_the_kernel(a, tmp_path):
    path = tmp_path / "bytes"
    path.write_bytes(b"\x01" * 100)
    with open(path, "rb", buffering=0) as f:  # read(2) into the array: the kernel writes it
        f.readinto(memoryview(a).cast("B")[len(a) * 4:len(a) * 4 + 100])


def _write_from_another_thread(a):
    thread = threading.Thread(target=_write_middle, args=(a,))
    thread.start()
    thread.join()


def _drop_a_page(a):
    """``madvise(MADV_DONTNEED)``: the page reads as zeros after it, and nothing wrote it."""
    page = (a.ctypes.data + a.nbytes // 2) // mmap.PAGESIZE * mmap.PAGESIZE
    assert _libc().madvise(page, mmap.PAGESIZE, 4) == 0


WRITES = [_write_middle, _write_first_partial_page, _write_last_partial_page,
          _write_through_torch_data, _write_by_the_kernel, _write_from_another_thread,
          _drop_a_page]


@needs_tracking
@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.__name__.strip("_"))
def test_every_way_of_writing_a_watched_storage_is_seen(write, hashed, tmp_path):
    """Its key is served without reading it while nothing writes it; after the write it is read
    again and the key is the new bytes'. Found unchanged at the next checkpoint, it is protected
    again (and read once more under the protection); from then on it is not read."""
    a = np.random.default_rng(0).random(3 * MIB // 8)
    first = key_of(a)
    assert key_of(a) == first and hashed == [a.nbytes]  # the second time: not read
    if write is _write_by_the_kernel:
        write(a, tmp_path)
    else:
        write(a)
    assert key_of(a) == xxhash.xxh3_128_digest(a) != first and hashed == [a.nbytes] * 2
    assert key_of(a) == xxhash.xxh3_128_digest(a) and hashed == [a.nbytes] * 4
    assert key_of(a) == xxhash.xxh3_128_digest(a) and hashed == [a.nbytes] * 4


@needs_tracking
def test_storages_over_the_same_pages_are_never_served_an_old_key(hashed):
    """Two storages over shared pages, watched by two writer threads at once: one's bytes read,
    then written, then the other's watch protects the shared page again (its written mark
    gone). The first storage's key no longer holds, and is not served."""
    pages = written_pages.tracker()
    base = np.full(4 * MIB, 7, dtype=np.uint8)  # in memory (np.zeros maps none yet)
    x, y = base[:3 * MIB], base[MIB:]
    vx, vy = memoryview(x).cast("B"), memoryview(y).cast("B")
    watch_x = pages.watch(x.ctypes.data, vx)
    assert watch_x.armed
    old = xxhash.xxh3_128_digest(vx)
    base[2 * MIB] = 1  # after x was read: x has changed
    watch_y = pages.watch(y.ctypes.data, vy)
    pages.keep(watch_x, vx, old)
    pages.keep(watch_y, vy, xxhash.xxh3_128_digest(vy))
    assert pages.known_digest(x.ctypes.data, vx) is None
    assert key_of(x) == xxhash.xxh3_128_digest(x) != old


@needs_tracking
def test_a_key_is_not_served_when_another_storage_takes_its_pages_during_the_check(
        hashed, monkeypatch):
    """The other interleaving: a storage's key is being checked while another writer thread's
    watch protects their shared pages again (their written marks gone)."""
    pages = written_pages.tracker()
    base = np.full(4 * MIB, 7, dtype=np.uint8)
    x, y = base[:3 * MIB], base[MIB:]
    vx, vy = memoryview(x).cast("B"), memoryview(y).cast("B")
    old = key_of(x)
    base[2 * MIB] = 1  # x has changed since its key
    scan = pages._unwritten

    def interleaved(watch, view):
        if watch.address == x.ctypes.data:
            pages.watch(y.ctypes.data, vy)  # the other thread, between lookup and scan
        return scan(watch, view)

    monkeypatch.setattr(pages, "_unwritten", interleaved)
    assert pages.known_digest(x.ctypes.data, vx) is None
    monkeypatch.undo()
    assert key_of(x) == xxhash.xxh3_128_digest(x) != old


@needs_tracking
def test_memory_mapped_again_at_the_same_address_is_read_again(hashed):
    """The storage's memory unmapped and new memory mapped at the same address (what an
    allocator may do between two checkpoints): not protected, so read again."""
    libc, size = _libc(), 2 * MIB
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    view = (ctypes.c_char * size).from_address(address)
    try:
        view[:] = b"\x01" * size
        first = blobwriter._content_key(memoryview(view).cast("B"), address)
        assert libc.munmap(address, size) == 0
        again = libc.mmap(address, size, mmap.PROT_READ | mmap.PROT_WRITE,
                          flags | 0x10, -1, 0)  # MAP_FIXED
        assert again == address
        view[:] = b"\x02" * size
        assert blobwriter._content_key(memoryview(view).cast("B"), address) != first
        assert hashed == [size, size]
    finally:
        libc.munmap(address, size)


@needs_tracking
def test_shared_memory_another_process_writes_is_read_every_time(hashed):
    """Shared memory (``share_memory_()``, a ``MAP_SHARED`` mapping): another process writes it
    without a fault here, so it is never served from a key."""
    shared = mmap.mmap(-1, 2 * MIB)
    a = np.frombuffer(shared, dtype=np.uint8)
    first = key_of(a)
    pid = os.fork()
    if pid == 0:  # the child writes the shared page, then leaves at once
        shared[MIB] = 7
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert key_of(a) == xxhash.xxh3_128_digest(a) != first and len(hashed) == 2
    del a
    shared.close()


@needs_tracking
def test_a_file_mapped_privately_is_read_every_time(hashed, tmp_path):
    """A private mapping of a file shows the file's bytes where the program did not write: a
    change to the file changes them without a fault here."""
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x01" * (2 * MIB))
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 2 * MIB, flags=mmap.MAP_PRIVATE)
        a = np.frombuffer(mapped, dtype=np.uint8)
        first = key_of(a)
        os.pwrite(f.fileno(), b"\x02" * 100, MIB)
        assert key_of(a) == xxhash.xxh3_128_digest(a) != first
        assert key_of(a) == xxhash.xxh3_128_digest(a) and hashed == [a.nbytes] * 3
        del a
        mapped.close()


def test_only_memory_torch_or_numpy_allocated_unpinned_is_watched(monkeypatch):
    """Pinned host memory is written by a device's DMA, which the page tables do not see; memory
    another object lends (``torch.frombuffer``, an array over a mapping or another library's
    buffer) may be such memory."""
    owned = torch.randn(10)
    assert written_pages.watchable(owned.untyped_storage(), "torch", "cpu")
    assert written_pages.watchable(np.ones(3), "numpy", "cpu")
    lent = torch.frombuffer(bytearray(40), dtype=torch.float32)
    assert not written_pages.watchable(lent.untyped_storage(), "torch", "cpu")
    assert not written_pages.watchable(np.frombuffer(mmap.mmap(-1, 80)), "numpy", "cpu")
    assert not written_pages.watchable(None, "cuda_array", "cuda:0")

    class Pinned:  # a storage torch pinned, once its CUDA runs (none here)
        def resizable(self):
            return True

        def is_pinned(self):
            return True

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert not written_pages.watchable(Pinned(), "torch", "cpu")


@pytest.mark.parametrize("refusal", ["no system call", "turned off"])
def test_without_the_system_call_every_storage_is_read(refusal, monkeypatch, hashed):
    """Where the system refuses (another architecture, seccomp, an older kernel), or
    ``GKERESUME_WATCH_WRITES=0`` turns it off, nothing is watched: every checkpoint reads every
    storage, as before."""
    if refusal == "no system call":
        monkeypatch.setattr(written_pages, "_USERFAULTFD_SYSCALL", {})
    else:
        monkeypatch.setenv(written_pages.WATCH_ENV, "0")
    monkeypatch.setattr(written_pages, "_tracker", None)
    assert written_pages.tracker() is None
    a = np.ones(2 * MIB // 8)
    assert key_of(a) == key_of(a) and hashed == [a.nbytes, a.nbytes]


def test_changes_between_checkpoints_come_back(tmp_path, hashed):
    """Checkpoints of one session in a row, with a model's weights changed through ``.data``
    and an array changed in place between them: each resume brings back what was there; the
    checkpoint after an unchanged stretch does not read the big storages again (where the
    system watches them: the third finds the changed ones unchanged and protects them again,
    the fourth reads none)."""
    import builtins

    import kernel_hooks

    torch.manual_seed(0)
    model = torch.nn.Linear(512, 1024)
    ns = {"model": model, "table": np.arange(MIB // 8, dtype=np.float64)}
    store = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    model.weight.data[7, 7] = 123.0
    ns["table"][MIB // 16] = -1.0
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    big = len([n for n in hashed if n >= written_pages.WATCH_MIN_BYTES])
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    if written_pages.tracker() is not None:
        assert len([n for n in hashed if n >= written_pages.WATCH_MIN_BYTES]) == big
    restored: dict = {"__builtins__": builtins}
    report = kernel_hooks.resume(namespace=restored, store=store, workspace="ws")
    assert report.verdict["level"] == "exact", report.verdict
    assert torch.equal(restored["model"].weight, model.weight)
    assert restored["model"].weight[7, 7] == 123.0
    assert np.array_equal(restored["table"], ns["table"]) and restored["table"][MIB // 16] == -1.0


def test_what_a_resume_restored_is_not_read_again_unless_written(gcs_bucket, hashed,
                                                                monkeypatch):
    """The pause after a resume from ``gs://`` (the emulator): the storages the resume restored
    into new memory are watched from the resume on, so the checkpoint after it does not read
    those nothing wrote; one written in place is read, and the next resume brings back its new
    value. (From a local store the resume serves big storages over its mappings of the blob
    files, which are not watched: ``WrittenPages.watch``.)"""
    import builtins

    import kernel_hooks

    for name, value in gcs_bucket.env.items():
        monkeypatch.setenv(name, value)
    torch.manual_seed(0)
    ns = {"frozen": torch.randn(MIB), "trained": torch.randn(MIB // 2)}  # 4 MiB, 2 MiB
    kernel_hooks.checkpoint(namespace=ns, store=gcs_bucket.url, workspace="ws")
    restored: dict = {"__builtins__": builtins}
    kernel_hooks.resume(namespace=restored, store=gcs_bucket.url, workspace="ws")
    restored["trained"][MIB // 4] = 5.0
    hashed.clear()
    kernel_hooks.checkpoint(namespace=restored, store=gcs_bucket.url, workspace="ws")
    if written_pages.tracker() is not None:
        assert [n for n in hashed if n >= written_pages.WATCH_MIN_BYTES] == [MIB // 2 * 4]
    again: dict = {"__builtins__": builtins}
    report = kernel_hooks.resume(namespace=again, store=gcs_bucket.url, workspace="ws")
    assert report.verdict["objects_at_risk"] == {}, report.verdict  # (the process's own
    # gcsfs threads and emulator variables are named: this is not a kernel of its own)
    assert torch.equal(again["frozen"], ns["frozen"]) and again["trained"][MIB // 4] == 5.0
    assert torch.equal(again["trained"], restored["trained"])


def test_a_pause_watches_nothing_new_but_uses_what_was_watched(tmp_path, hashed):
    """A pause's kernel stops after its checkpoint (the server's reasons: user, idle, shutdown):
    protecting pages then would cost the pause and pay back nothing. The keys of storages a
    ``%checkpoint`` watched before still serve it."""
    import kernel_hooks

    ns = {"table": np.random.default_rng(1).random(MIB // 4)}  # 2 MiB
    store = str(tmp_path / "store")

    def big_reads(reason: str) -> int:
        hashed.clear()
        kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws", reason=reason)
        return len([n for n in hashed if n >= written_pages.WATCH_MIN_BYTES])

    big_reads("user")  # the first: keyed while written
    assert big_reads("idle") == 1  # not watched by the pause before
    assert big_reads("checkpoint") == 1  # read once more, and watched from now on
    if written_pages.tracker() is not None:
        assert big_reads("shutdown") == 0


def test_a_pause_after_a_checkpoint_carries_every_write_in_a_real_kernel(start_kernel):
    """The path a person takes, in real kernels: ``%checkpoint``, then writes in place of every
    kind (a parameter through ``.data``, an optimizer step, a NumPy slice, a ``read(2)`` into an
    array), then the pause's checkpoint (reason ``user``, as the server asks it), which uses the
    keys the ``%checkpoint`` left; a fresh kernel resumes every value written."""
    k = start_kernel()
    k.run("import torch, numpy as np, kernel_hooks, json, os, tempfile\n"
          "torch.manual_seed(0)\n"
          "model = torch.nn.Linear(1024, 1024)\n"
          "opt = torch.optim.Adam(model.parameters())\n"
          "model(torch.randn(2, 1024)).sum().backward(); opt.step()\n"
          "table = np.random.default_rng(0).random(1 << 18)\n"
          "frozen = torch.randn(1 << 20)\n"
          "path = os.path.join(tempfile.mkdtemp(), 'bytes')\n"
          "open(path, 'wb').write(b'\\x07' * 64)")
    k.run("%checkpoint")
    k.run("model.weight.data[3, 3] = 42.0\n"
          "model(torch.randn(2, 1024)).sum().backward(); opt.step()\n"
          "table[1000:1010] = -1.0\n"
          "with open(path, 'rb', buffering=0) as f:\n"
          "    f.readinto(memoryview(table).cast('B')[8 * 5000:8 * 5008])\n"
          "digest = lambda: [float(model.weight.detach().double().sum()),\n"
          "    float(model.bias.detach().double().sum()),\n"
          "    float(table.sum()), float(frozen.double().sum()),\n"
          "    float(sum(s['exp_avg'].double().sum() for s in opt.state.values()))]\n"
          "before = digest()")
    assert k.run_json("r = kernel_hooks.checkpoint(reason='user')\n"
                      "print(json.dumps([s.name for s in r.skipped]))") == []
    before = k.run_json("print(json.dumps(before))")
    fresh = start_kernel()
    fresh.run("import kernel_hooks, json\nr = kernel_hooks.resume()")
    assert fresh.run_json("print(json.dumps(digest()))") == before
    written = "print(json.dumps(float(model.weight[3, 3].detach())))"  # 42, then a step
    assert fresh.run_json(written) == k.run_json(written) != 0.0


@needs_tracking
def test_a_local_store_claims_what_needs_no_reading_without_the_writers_threads(
        tmp_path, hashed, monkeypatch):
    """On a local store an unchanged checkpoint claims each blob in the calling thread (a stat
    and a touch: less than a thread's hand-off, issue 31 item 5), the big storages' keys from
    the page tables, a pack of small ones' by hashing it there (under ``WATCH_MIN_BYTES``);
    the writer's pool gets only what needs reading or writing: every blob the first time, one
    written since later, every blob a second store lacks although the skip-cache knows it
    (claimed there, it would be written in the calling thread, one at a time). What was
    written comes back from both stores."""
    import builtins
    from concurrent.futures import ThreadPoolExecutor

    import kernel_hooks

    pooled: list[list[int]] = []

    class Recording(ThreadPoolExecutor):
        def map(self, fn, plans, **kwargs):
            plans = list(plans)
            pooled.extend([m.nbytes for m in plan] for plan in plans)
            return super().map(fn, plans, **kwargs)

    def taken() -> list[list[int]]:
        found = sorted(pooled)
        pooled.clear()
        return found

    monkeypatch.setattr(blobwriter, "ThreadPoolExecutor", Recording)
    rng = np.random.default_rng(2)
    ns = {"a": rng.random(MIB // 4), "b": rng.random(MIB // 4), "small": torch.ones(100)}
    store = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")  # keyed while written
    assert [p for p in taken() if p == [2 * MIB]] == [[2 * MIB]] * 2  # (a small blob the
    # skip-cache knows from another test's store is written here: it is not the point)
    hashed.clear()
    kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    assert taken() == [] and 2 * MIB not in hashed and 400 in hashed  # big ones: not read
    ns["b"][5] = -1.0
    result = kernel_hooks.checkpoint(namespace=ns, store=store, workspace="ws")
    assert taken() == [[2 * MIB]] and result.bytes_new > 2 * MIB
    other = str(tmp_path / "other")  # the skip-cache knows every blob; this store has none
    kernel_hooks.checkpoint(namespace=ns, store=other, workspace="ws")
    assert [p for p in taken() if p == [2 * MIB]] == [[2 * MIB]] * 2  # written by the pool
    for root in (store, other):
        restored: dict = {"__builtins__": builtins}
        kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
        assert restored["b"][5] == -1.0 and np.array_equal(restored["b"], ns["b"])
        assert np.array_equal(restored["a"], ns["a"])
