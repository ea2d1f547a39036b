"""Storages -> content-addressed blobs: plan, hash, skip what the store has, write the rest.

Call order: ``plan_blobs(collector.items)`` groups storages (big ones alone, small ones packed per
owning variable so a change to one small variable rewrites only its pack), then
``BlobWriter.write_all(plans)`` puts them in parallel through the snapshot's ``SnapshotWriter``
(the commit protocol lives there) and returns where every storage went.

Blobs are named by ``digests.DEFAULT`` (BLAKE3; big blobs hashed with every core, the GIL
released, so parallel blobs hash in parallel). Unchanged storages are not hashed again: an
in-process cache (``SkipCache``) maps (algorithm, dtypes, sizes, xxh3-128 of the bytes) to the blob
digest, and xxh3 runs near memory speed; a big storage in host memory is not even read where the
page tables show that nothing wrote it since its key was taken (``written_pages``). A hit goes
to ``SnapshotWriter.put_blob``, which claims it when the store has it. A miss is new content and
goes to ``SnapshotWriter.put_new_blob``: on a local store it is hashed while it is written (one
pass: a temporary file linked under its digest, or dropped when the store has that blob
already), on an object store hashed first so an existing blob is reused without an upload. When
no cached blob has the entries' dtypes and sizes (a session's first checkpoint, a new variable),
no key can hit: on a local store the xxh3 keys are then taken on the way, chunk by chunk just
before each chunk is hashed and written, so each byte is read from memory once (issue 31).
``remember_blob`` seeds the cache from a resume, so the first checkpoint after it reuses what it
restored.

Host memory stays flat for CPU storages (blobs are written from zero-copy views) and for CUDA
storages when the CUDA engine is there (``cuda_engine.get_engine()``): they stream through its
pinned ring twice, once to hash (the hash runs as the chunks come off the ring) and, only if the
store lacks the blob, once to write. (One pass would rewrite an unchanged GPU model at every
checkpoint: device memory has no cheap fingerprint to look up first.)
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import xxhash

from jupyter_gkeresume.snapshot import checksum
from jupyter_gkeresume.snapshot.blobfile import DATA_ALIGNMENT, blob_digest, layout_for
from jupyter_gkeresume.snapshot.digests import DEFAULT, Digest, algorithm_of
from jupyter_gkeresume.snapshot.format import StorageRef
from jupyter_gkeresume.snapshot.writer import SnapshotWriter

from .cuda_engine import CudaEngine, get_engine
from .cuda_plan import cuda_index
from .memory import host_view
from .progress import PhaseBytes, ProgressSink
from .storages import CollectedStorage
from .written_pages import WATCH_MIN_BYTES, WrittenPages, tracker, watchable

PACK_BELOW = 1 << 20
PACK_LIMIT = 16 << 20
DIGEST_CACHE_SIZE = 200_000


class SkipCache:
    """The skip-cache: ``cache_key`` -> blob digest, least recently used dropped beyond
    ``DIGEST_CACHE_SIZE``; ``has_shape`` tells whether any key has these (algorithm, dtypes,
    sizes), i.e. whether a content key could hit at all. Thread-safe."""

    def __init__(self) -> None:
        self._digests: OrderedDict[tuple, str] = OrderedDict()
        self._shapes: Counter[tuple] = Counter()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> str | None:
        with self._lock:
            digest = self._digests.get(key)
            if digest is not None:
                self._digests.move_to_end(key)
            return digest

    def remember(self, key: tuple, digest: str) -> None:
        with self._lock:
            if key not in self._digests:
                self._shapes[key[:3]] += 1
            self._digests[key] = digest
            self._digests.move_to_end(key)
            while len(self._digests) > DIGEST_CACHE_SIZE:
                dropped, _ = self._digests.popitem(last=False)
                self._shapes[dropped[:3]] -= 1
                if not self._shapes[dropped[:3]]:
                    del self._shapes[dropped[:3]]

    def has_shape(self, shape: tuple) -> bool:
        with self._lock:
            return shape in self._shapes

    def clear(self) -> None:
        with self._lock:
            self._digests.clear()
            self._shapes.clear()

    def values(self) -> list[str]:
        with self._lock:
            return list(self._digests.values())

    def __contains__(self, key: tuple) -> bool:
        with self._lock:
            return key in self._digests

    def __len__(self) -> int:
        with self._lock:
            return len(self._digests)


_digest_cache = SkipCache()


def plan_blobs(items: list[CollectedStorage]) -> list[list[CollectedStorage]]:
    """Group storages into blobs: one per big storage, packs of small ones per owner. In a
    pack, the storages whose size is a whole number of ``DATA_ALIGNMENT`` blocks come first:
    each of them then starts on such a boundary in the file, as the blob's data do, so a
    resume that maps the blob serves them over it (``loader.HOST_ALIGNMENT``); the others are
    copied there."""
    plans: list[list[CollectedStorage]] = []
    packs: dict[str, list[CollectedStorage]] = {}
    for item in items:
        if item.nbytes >= PACK_BELOW:
            plans.append([item])
            continue
        pack = packs.setdefault(item.owner, [])
        if pack and sum(m.nbytes for m in pack) + item.nbytes > PACK_LIMIT:
            plans.append(pack)
            pack = packs[item.owner] = []
        pack.append(item)
    plans.extend(p for p in packs.values() if p)
    return [sorted(plan, key=lambda m: m.nbytes % DATA_ALIGNMENT != 0) for plan in plans]


@dataclass
class WrittenBlobs:
    refs: dict[str, StorageRef]
    sizes: dict[str, int]
    new_bytes: int = 0
    reused_bytes: int = 0


class BlobWriter:
    """Puts planned blobs through ``writer`` with ``concurrency`` threads, reporting progress.
    ``watch_new``: big storages not watched yet are watched (``written_pages``) from this
    checkpoint on; False for a pause, whose kernel stops after it (the keys of those watched
    before still serve)."""

    def __init__(self, writer: SnapshotWriter, concurrency: int | None = None,
                 progress: ProgressSink | None = None, watch_new: bool = True):
        self.writer = writer
        self.concurrency = concurrency or writer.store.concurrency
        self.progress = progress
        self.watch_new = watch_new
        self._writing = PhaseBytes("writing", 0, None)

    def write_all(self, plans: list[list[CollectedStorage]]) -> WrittenBlobs:
        """Write every planned blob; progress (phase ``writing``, bytes of the storages) moves
        with every chunk written, and by a whole blob when one is reused."""
        self._writing = PhaseBytes("writing", sum(m.nbytes for plan in plans for m in plan),
                                   self.progress)
        pages = tracker()
        if pages is not None:  # the storages are collected: their memory is mapped by now
            pages.new_checkpoint()
        out = WrittenBlobs({}, {})
        # On a local store, a blob known by keys taken without reading much (page tables) is
        # claimed here: a stat and a touch cost less than handing them to a thread (10 ms of an
        # unchanged checkpoint's 25 at 1.5 GB, docs/benchmarks.md); the pool does the rest.
        done = [self._write_plan(plan, claim_only=True) if self.writer.store.backend.local
                else None for plan in plans]
        rest = [plan for plan, result in zip(plans, done, strict=True) if result is None]
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="gkeresume-write") as pool:
            written = iter(pool.map(self._write_plan, rest))
            done = [next(written) if result is None else result for result in done]
        for plan, (digest, size, new) in zip(plans, done, strict=True):
            out.sizes[digest] = size
            if new:
                out.new_bytes += size
            else:
                out.reused_bytes += size
            for entry, m in enumerate(plan):
                out.refs[m.key] = StorageRef(digest, entry, m.nbytes, m.dtype, m.device, m.kind,
                                            m.owner)
        return out

    def write_bytes(self, data: bytes) -> tuple[str, int, bool]:
        """Write one raw byte string (the graph) as a single-entry blob, counted in the writing
        phase (``write_more``)."""
        return self.write_more([("uint8", data)])

    def write_more(self, entries: list[tuple[str, object]]) -> tuple[str, int, bool]:
        """``write_views`` of a blob beyond the planned storages (the graph, a package, a
        directory): its bytes join the writing phase's total and move it as they are written,
        so the phase ends at what the snapshot holds (its ``bytes_total`` but for the blob
        headers), the size every report says."""
        nbytes = sum(memoryview(b).nbytes for _, b in entries)
        self._writing.grow(nbytes)
        share = self._writing.share(nbytes)
        try:
            return self.write_views(entries, share.add)
        finally:
            share.finish()

    def write_views(self, entries: list[tuple[str, object]],
                    sent: Callable[[int], None] | None = None,
                    addresses: list[int | None] | None = None,
                    claim_only: bool = False) -> tuple[str, int, bool] | None:
        """Write a blob of ``(dtype, buffer)`` entries; returns (digest, size, newly written).
        ``sent`` is told the bytes of each chunk as it is written. ``addresses``: where each
        entry's buffer lies in host memory that ``written_pages`` may watch (None: it may not).
        ``claim_only``: only claim a blob the skip-cache knows by keys taken without reading a
        big entry (``cache_key``) and the store has, else None (nothing written)."""
        views = [memoryview(b).cast("B") for _, b in entries]
        addresses = addresses or [None] * len(views)
        layout = layout_for([(dtype, len(v)) for (dtype, _), v in zip(entries, views, strict=True)])
        shape = _shape(DEFAULT, [d for d, _ in entries], views)
        parts = [layout.header, *views]
        keyed = None
        try:
            if self.writer.store.hashes_while_writing and not _digest_cache.has_shape(shape):
                if claim_only:
                    return None
                # no key can hit: new content, keyed on the way (each byte read once)
                pages = [_pages_watching(v, a) for v, a in zip(views, addresses, strict=True)]
                watches = [p.watch(a, v) if p is not None and self.watch_new else None
                           for p, v, a in zip(pages, views, addresses, strict=True)]
                keyers = [xxhash.xxh3_128() for _ in views]
                keyed = _keyed_parts(layout.header, views, keyers,
                                     self.writer.store.hashing_chunk(DEFAULT, layout.size))
                digest, new = self.writer.put_new_blob(layout.size, keyed, DEFAULT, sent=sent)
                for p, watch, view, keyer in zip(pages, watches, views, keyers, strict=True):
                    if watch is not None:
                        p.keep(watch, view, keyer.digest())
                _digest_cache.remember((*shape, tuple(k.digest() for k in keyers)), digest)
                return digest, layout.size, new
            key = cache_key(DEFAULT, [d for d, _ in entries], views, addresses,
                            watch_new=self.watch_new, claim_only=claim_only)
            digest = None if key is None else _digest_cache.get(key)
            if digest is None:
                if claim_only:
                    return None
                digest, new = self.writer.put_new_blob(layout.size, parts, DEFAULT, sent=sent)
                _digest_cache.remember(key, digest)
            elif claim_only:
                if not self.writer.claim_blob(digest, layout.size, lambda: parts):
                    return None  # the store lacks it (another store, a gc): the pool writes it
                new = False
            else:
                new = self.writer.put_blob(digest, layout.size, lambda: parts, sent=sent)
        finally:
            # A callee's frame can outlive this call in a reference cycle (an exception caught
            # on the way, with its traceback) and keeps this frame, so these lists, alive: they
            # must not keep the caller's buffers exported (a mapped file could not be closed).
            if keyed is not None:
                keyed.close()
            parts.clear()
            views.clear()
        return digest, layout.size, new

    def _write_plan(self, plan: list[CollectedStorage],
                    claim_only: bool = False) -> tuple[str, int, bool] | None:
        """Write one planned blob (``claim_only``: see ``write_views``; device memory, or a
        pack of small storages of ``WATCH_MIN_BYTES`` or more, always needs reading)."""
        devices = {m.device for m in plan} - {"cpu"}
        if claim_only and (devices or sum(m.nbytes for m in plan if m.nbytes < WATCH_MIN_BYTES)
                           >= WATCH_MIN_BYTES):
            return None
        engine = get_engine() if devices and all(cuda_index(d) is not None for d in devices) else None
        share = self._writing.share(sum(m.nbytes for m in plan))
        if engine is not None:
            result = self._write_streamed(engine, plan, share.add)
        else:
            keepalive, entries, addresses = [], [], []
            for m in plan:
                if m.device == "cpu":
                    entries.append((m.dtype, m.host_bytes()))
                    addresses.append(m.address if watchable(m.source, m.kind, m.device) else None)
                else:  # device memory without the CUDA engine: bring it to the host first
                    host = m.source.cpu()
                    keepalive.append(host)
                    entries.append((m.dtype, host_view(host.data_ptr(), m.nbytes)))
                    addresses.append(None)
            result = self.write_views(entries, share.add, addresses, claim_only)
        if result is not None:
            share.finish()
        return result

    def _write_streamed(self, engine: CudaEngine, plan: list[CollectedStorage],
                        sent: Callable[[int], None]) -> tuple[str, int, bool]:
        """A blob with CUDA storages, streamed through the engine's pinned ring in two passes
        (hash, then write only if the store lacks it): host memory stays within the ring. On an
        object store the first pass also takes the blob's crc32c, so that claiming an existing
        blob (which compares it with the stored one) needs no third pass."""
        layout = layout_for([(m.dtype, m.nbytes) for m in plan])
        crc = [checksum.extend(0, layout.header)] if not self.writer.store.backend.local else None

        def hashed() -> Iterator[memoryview]:
            for chunk in _entry_parts(engine, plan):
                if crc is not None:
                    crc[0] = checksum.extend(crc[0], chunk)
                yield chunk

        digest = blob_digest(layout, hashed(), DEFAULT)
        new = self.writer.put_blob(
            digest, layout.size, lambda: itertools.chain([layout.header], _entry_parts(engine, plan)),
            sent=sent, crc32c=crc[0] if crc is not None else None,
        )
        return digest, layout.size, new


def _entry_parts(engine: CudaEngine, plan: list[CollectedStorage]) -> Iterator[memoryview]:
    """The entries' bytes in blob order: host storages as zero-copy views, CUDA storages as
    chunks of the engine's ring (each valid until the next is asked for)."""
    for m in plan:
        if m.device == "cpu":
            yield m.host_bytes()
        else:
            yield from engine.device_to_host_chunks(m.address, m.nbytes, cuda_index(m.device))


def _shape(algorithm: Digest, dtypes: list[str], views: list[memoryview]) -> tuple:
    return algorithm.name, tuple(dtypes), tuple(len(v) for v in views)


def _keyed_parts(header: bytes, views: list[memoryview], keyers: list[xxhash.xxh3_128],
                 step: int) -> Iterator[memoryview | bytes]:
    """The blob's parts, each entry in chunks of ``step`` (the store's ``hashing_chunk``) that
    update its xxh3 key just before the store hashes and writes them (still in the CPU's cache)."""
    yield header
    for view, keyer in zip(views, keyers, strict=True):
        for start in range(0, len(view), step):
            chunk = view[start:start + step]
            keyer.update(chunk)
            yield chunk


def _content_key(view: memoryview, address: int | None, made_here: bool = False,
                 watch_new: bool = True, claim_only: bool = False) -> bytes | None:
    """The xxh3-128 of an entry's bytes, without reading them where the page tables show that
    nothing wrote them since their key was taken (``written_pages``; ``made_here``: see
    ``WrittenPages.watch``; ``watch_new``: see ``BlobWriter``; ``claim_only``: None where a big
    entry's bytes would have to be read)."""
    pages = _pages_watching(view, address)
    if pages is None:
        big = claim_only and len(view) >= WATCH_MIN_BYTES
        return None if big else xxhash.xxh3_128_digest(view)
    digest = pages.known_digest(address, view)
    if digest is not None or claim_only:
        return digest
    if not watch_new:
        return xxhash.xxh3_128_digest(view)
    before = pages.kept_digest(address, len(view))
    watch = pages.watch(address, view, made_here=made_here)
    digest = xxhash.xxh3_128_digest(view)
    if before == digest:  # written before, unchanged since: watched again, and read under it
        watch = pages.watch(address, view, again=True)
        digest = xxhash.xxh3_128_digest(view)
    pages.keep(watch, view, digest)
    return digest


def _pages_watching(view: memoryview, address: int | None) -> WrittenPages | None:
    """The write tracker where it may watch this entry (a big storage in host memory)."""
    return tracker() if address is not None and len(view) >= WATCH_MIN_BYTES else None


def cache_key(algorithm: Digest, dtypes: list[str], views: list[memoryview],
              addresses: list[int | None] | None = None, made_here: bool = False,
              watch_new: bool = True, claim_only: bool = False) -> tuple | None:
    """The skip-cache key of a blob's entries: algorithm, dtypes, sizes, xxh3-128 of each
    (``_content_key``: not read again where ``addresses`` says where it may be watched;
    ``claim_only``: None where a big entry would have to be read)."""
    keys = []
    for view, address in zip(views, addresses or [None] * len(views), strict=True):
        key = _content_key(view, address, made_here, watch_new, claim_only)
        if key is None:
            return None
        keys.append(key)
    return (*_shape(algorithm, dtypes, views), tuple(keys))


def remember_blob(digest: str, dtypes: list[str], views: list[memoryview],
                  addresses: list[int | None] | None = None) -> None:
    """Record that entries with these bytes make blob ``digest`` (a resume calls this for what
    it read and verified), so that a checkpoint of the same bytes reuses the blob. The entries
    at ``addresses`` (new memory the resume allocated) are watched from then on, so that such
    a checkpoint does not read them again."""
    _digest_cache.remember(cache_key(algorithm_of(digest), dtypes, views, addresses, True), digest)
