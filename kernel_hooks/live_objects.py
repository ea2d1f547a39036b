"""Library objects that hold live resources of this process: carried where they can be, else
named (issue 28 item 8).

Call order: ``take_checkpoint`` asks ``LiveObjects.reason(value)`` for each top-level variable (one
that cannot travel is not saved, with that reason); the graph pickler (``graph``) asks
``LiveObjects.reduce(obj, note)`` for every object after the user's own registrations and before
the generic placeholders
(``placeholders.uncapturable_reason``); ``None`` means "not one of these". What it cannot carry is
noted with ``note.placeholder`` (``graph.RecordNote``: what came back as a placeholder), so the checkpoint
names it and the resume's verdict is not ``exact``. asyncio tasks left pending on the kernel's loop
are named with the other things left behind (``left_behind``).

- A lock nobody holds (``threading.Lock``, ``RLock``; inside a ``queue.Queue``, an ``Event``, a
  ``Condition``, a thread-safe cache) comes back as a new unlocked lock; a held one is named.
- ``sys.stdout``, ``sys.stderr`` and the other standard streams (a ``tqdm`` bar writes to
  stderr through a wrapper; a ``print(file=...)`` helper keeps one) are this process's, and
  the resumed process has its own: they pickle by name and come back as the resumed kernel's
  (a placeholder there failed the whole progress bar at resume); not a ``sys.stdout`` a cell
  redirected (``redirected_streams``), which is the session's object.
- A tqdm progress bar (tqdm/std.py) writing to a standard stream: its stream wrapper
  (``DisableOnWriteError``, closures over the stream's ``write`` and a weak proxy of the bar) and
  status printer belong to this process; the bar pickles as its counters and settings and is
  set up again on the resumed kernel's stream (``_progress_bar``), at the count it had. A
  notebook bar (tqdm/notebook.py) gets a new widget, shown where it next moves.
- A TensorBoard ``SummaryWriter`` (torch's or tensorboardX's) is flushed at the checkpoint and
  comes back as after its ``close()``: its next event opens a new event file in its ``log_dir``.
- A ``numpy.memmap`` sharing a file (``np.memmap(path, mode="r" | "r+" | "w+")``) on what the
  next pod has is reopened on that file (``_memmap_reduce``): it pickled as an in-memory copy,
  so writes after a resume silently no longer reached the file, views no longer shared memory
  with it, and a large read-only dataset was copied into every snapshot.
- A ``datasets`` table memory-mapped from an Arrow file of the library's cache
  (datasets/table.py ``MemoryMappedTable``, what ``load_dataset`` and ``map`` make) pickles as
  its path. Where that file stays on this pod (``HF_DATASETS_CACHE`` on a scratch disk), the
  dataset and all made from it were not restored. It travels as the file's bytes, a blob,
  with the steps datasets replays on it (``_arrow_file_reduce``), and comes back over them;
  a table whose file comes back is reopened on it, as datasets does.
- A DataLoader iterator (torch/utils/data/dataloader.py: ``_BaseDataLoaderIter.__getstate__``
  raises ``NotImplementedError``) without worker processes, over torch's own samplers
  (``FIXED_ORDER_SAMPLERS``), comes back at its batch (``_iterator_reduce``): those samplers fix
  an epoch's order when it starts, so the rest of it is read at the checkpoint (this session
  goes on from that list too) and travels; one not yet started draws its order at its first
  batch, after the resume as before. Any other (worker processes, an ``IterableDataset``, a
  sampler of the notebook's, which may yield as it goes and must not be run ahead) becomes an
  ``Uncaptured`` placeholder that names its position and, with ``num_workers > 0``, its worker
  processes' pids (they stay on this pod; ``left_behind`` names each among the child
  processes). A DataLoader comes back without the
  iterator it keeps with ``persistent_workers=True`` (``DataLoader._iterator``, which
  ``__iter__`` resets at every epoch): its next iteration starts its workers again; that is
  named too.
- A ``sqlite3.Connection`` to a database file that comes back with the pod (the home volume, the
  server root, ``extra_paths``: ``left_behind.comes_back``), with no open transaction and nothing
  attached, pickles as ``reopen_sqlite(path, isolation_level, row_factory)``: the resume opens
  the same file again (a file missing then fails that record, named). An in-memory database
  travels as its bytes (``Connection.serialize``, Python 3.11+) and comes back as a new in-memory
  database holding them (two connections that shared one, ``cache=shared``, come back with a
  copy each). A file elsewhere, uncommitted changes, attached databases or temporary tables are
  named. What a connection holds that sqlite does not show (functions from
  ``create_function``, PRAGMAs set on it) is not seen: docs/core.md says so.
- A file ``open()`` returned, still open, on a regular file that comes back (or ``os.devnull``)
  is opened again on it at resume (``reopen_file``): same mode, encoding and error handling, at
  the position it had, its buffer flushed at the checkpoint, and never truncated (a training
  log opened with ``"w"`` goes on where it was). Its path is the file the descriptor has open:
  a relative name given to ``open()`` no longer names it after an ``os.chdir``. A file
  elsewhere, a pipe, a socket or a descriptor's ``os.fdopen`` are named. A text file's
  ``newline`` argument cannot be read back: it comes back with the default, which writes the
  same bytes on Linux and reads ``\r\n`` as ``\n``. A closed one (what ``with open(...) as f``
  leaves in ``f``) comes back closed, with its name and mode: that is all it shows. So does a
  closed stream of another kind (``with gzip.open(...) as f``), as a closed file of ``io``.

Invariant: nothing is imported; the library types come from ``sys.modules``, so a session
without torch pays one dict lookup per graph, and every object costs one ``isinstance`` check.
"""

from __future__ import annotations

import _io
import _thread
import contextlib
import copyreg
import functools
import inspect
import io
import os
import stat
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from .left_behind import comes_back, pool_idle
from .placeholders import IN_MEMORY, SHOWN_CHARS, uncapturable_reason
from .rebuild import current_loading

if TYPE_CHECKING:
    from .graph import RecordNote


#: The lock types (``threading.Lock``, ``threading.RLock`` in C and in Python).
LOCKS = (_thread.LockType, _thread.RLock, type(threading.RLock()), threading._RLock)
#: ``sys`` attributes whose stream, wherever the session holds it (a progress bar's output, a
#: handler's stream), is the resumed process's own: it pickles by that name.
STANDARD_STREAMS = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__")
#: Process pools (``multiprocessing.pool.ThreadPool`` is a ``Pool`` too), by module: named with
#: ``WORKER_POOL``; their own pickling fails with an obscure error ("Pickling an
#: AuthenticationString object is disallowed").
PROCESS_POOLS = (("concurrent.futures.process", "ProcessPoolExecutor"),
                 ("multiprocessing.pool", "Pool"))
WORKER_POOL = "a worker pool: its workers stay on this pod (create it again after the resume)"
#: Every stream, ``io``'s and those built on it (``gzip.GzipFile``): the C base class, whose
#: ``isinstance`` check costs what a plain class's does (``io.IOBase`` is an ABC).
STREAMS = _io._IOBase
#: What ``open()`` returns: a text file, a buffered one, or an unbuffered ``FileIO``.
FILES = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO)


def redirected_streams() -> list[str]:
    r"""``stdout`` and ``stderr`` where a cell replaced the kernel's own (``contextlib.
    redirect_stdout(buf)`` left open): in a kernel, whose streams are ipykernel's
    ``OutStream``\s, that object is the session's (a ``StringIO``, a file), not the process's
    stream, and travels as itself; the kernel's own, which the redirection keeps, comes back as
    the resumed kernel's (``singletons.KernelSingletons``)."""
    from .ipython_state import the_shell

    out_stream = getattr(sys.modules.get("ipykernel.iostream"), "OutStream", None)
    if out_stream is None or getattr(the_shell(), "kernel", None) is None:
        return []
    return [name for name in ("stdout", "stderr")
            if not isinstance(getattr(sys, name, None), out_stream)]


def _standard_stream(name: str) -> Any:
    return getattr(sys, name)


def _memmap_reduce(array: Any, note: RecordNote) -> tuple | None:
    """A ``numpy.memmap`` sharing its file (mode ``r``, ``r+``, ``w+``) on what the next pod has:
    reopened on that file at resume (written ones flushed first), a view as the same view of its
    reopened memmap, so writes still reach the file and views still share memory. ``None`` (its
    data travels as an array's) for a private one (``c``), and for one whose file stays behind,
    which is noted when it was written to: its writes would no longer reach a file."""
    import mmap

    root = array
    while isinstance(root, type(array)) and not isinstance(root.base, mmap.mmap):
        root = root.base
    if not isinstance(root, type(array)) or root.filename is None or root.mode == "c":
        return None
    if not comes_back(root.filename):
        if root.mode != "r":
            note.without(
                "numpy.memmap", f"its file {root.filename[:SHOWN_CHARS]} stays on the old pod: it "
                "comes back as an array in memory, and its writes no longer reach a file")
        return None
    if root.mode != "r":
        root.flush()
    if array is not root:
        start = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        return _memmap_view, (root, start, array.shape, array.strides, array.dtype)
    order = "F" if root.flags.f_contiguous and not root.flags.c_contiguous else "C"
    return _reopen_memmap, (root.filename, root.dtype, "r" if root.mode == "r" else "r+",
                            root.offset, root.shape, order)


#: Arrow files of ``datasets`` tables this kernel resumed while the file was gone, by path: the
#: restored bytes the table's buffers live in (``_arrow_table_over``), for the next checkpoint;
#: held weakly (the tables hold them while they live).
_ARROW_FILES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _arrow_file_reduce(table: Any) -> tuple | None:
    """A ``datasets`` table memory-mapped from an Arrow file that stays on this pod: its file's
    bytes (a read-only ``numpy.memmap``, which travels as an array: a blob) and the steps
    datasets replays on it (``_arrow_table_over``). ``None`` (datasets' own pickle, its path:
    reopened at resume) for one whose file comes back."""
    if comes_back(table.path):
        return None
    data = _ARROW_FILES.get(table.path)
    if data is None:
        import numpy

        data = numpy.memmap(table.path, dtype=numpy.uint8, mode="r")
    return _arrow_table_over, (type(table), data, table.path, table.replays)


def _arrow_table_over(cls: type, data: Any, path: str, replays: list) -> Any:
    """The table read from ``data`` (an Arrow stream, as datasets writes its cache files) with
    ``replays`` applied, made as ``MemoryMappedTable.__setstate__`` makes it, its buffers in
    ``data`` (no copy)."""
    import pyarrow

    table = pyarrow.ipc.open_stream(pyarrow.py_buffer(data)).read_all()
    made = cls.__new__(cls)
    cls.__init__(made, cls._apply_replays(table, replays), path=path, replays=replays)
    _ARROW_FILES[path] = data
    return made


def _reopen_memmap(path: str, dtype: Any, mode: str, offset: int, shape: tuple,
                   order: str) -> Any:
    import numpy

    return numpy.memmap(path, dtype=dtype, mode=mode, offset=offset, shape=shape, order=order)


def _memmap_view(root: Any, start: int, shape: tuple, strides: tuple, dtype: Any) -> Any:
    import numpy

    view = numpy.ndarray(shape, dtype, buffer=root, offset=start, strides=strides).view(type(root))
    view._mmap, view.filename, view.offset, view.mode = root._mmap, root.filename, root.offset, root.mode
    return view


def _progress_bar(cls: type, stream: str | None, state: dict[str, Any],
                  widget: dict[str, Any] | None = None, printed: int = 0) -> Any:
    """A tqdm bar again (``LiveObjects._bar_reduce``), writing to this process's ``stream`` as
    tqdm/std.py ``tqdm.__init__`` sets it up; ``tqdm.__new__`` counts it among the live bars.
    ``widget``: a notebook bar's (``_notebook_widget``); ``printed``: the length of the line
    its status printer wrote last, which the next one pads over (``bar.clear()``)."""
    bar = cls.__new__(cls)
    bar.__dict__.update(state)
    if stream is not None:
        from tqdm.utils import DisableOnWriteError

        bar.fp = DisableOnWriteError(getattr(sys, stream), tqdm_instance=bar)
        if widget is None:
            bar.sp = bar.status_printer(bar.fp)
            _printed_length(bar.sp)[0] = printed
    if widget is not None:
        _notebook_widget(bar, **widget)
    return bar


def _printed_length(status_printer: Any) -> list[int]:
    """The length of the line tqdm's status printer wrote last (tqdm/std.py
    ``tqdm.status_printer``: a one-item list its closure keeps, ``last_len``); a throwaway list
    for a printer without one."""
    code = getattr(status_printer, "__code__", None)
    if code is None or "last_len" not in code.co_freevars:
        return [0]
    return status_printer.__closure__[code.co_freevars.index("last_len")].cell_contents


def _notebook_widget(bar: Any, drawn: bool, colour: str | None, bar_style: str) -> None:
    """A notebook bar's widget again, as tqdm/notebook.py ``tqdm_notebook.__init__`` makes it
    (a disabled bar has none), drawn at the bar's count and style but not displayed: the one in
    the old output died with its kernel, and the new one is shown in the cell where the bar
    next moves (``_show_where_it_moves``)."""
    if not drawn:
        bar.disp = _no_display
        return
    from weakref import proxy

    unit_scale = 1 if bar.unit_scale is True else bar.unit_scale or 1
    total = bar.total * unit_scale if bar.total else bar.total
    bar.container = bar.status_printer(bar.fp, total, bar.desc, bar.ncols)
    bar.container.pbar = proxy(bar)
    bar.colour = colour
    type(bar).display(bar, check_delay=False, bar_style=bar_style or None)
    bar.displayed = False
    bar.display = bar.disp = functools.partial(_show_where_it_moves, bar)


def _show_where_it_moves(bar: Any, *args: Any, **kwargs: Any) -> Any:
    """A resumed notebook bar's first display: its widget is shown in the running cell, then
    tqdm's own display takes over (the instance's ``display`` goes)."""
    from IPython.display import display

    del bar.display
    bar.disp = bar.display
    display(bar.container)
    bar.displayed = True
    return bar.display(*args, **kwargs)


def _no_display(*_: Any, **__: Any) -> None:
    """A disabled notebook bar's ``disp`` (tqdm/notebook.py sets a lambda: it does not pickle)."""


#: The modules of TensorBoard writers: torch's (torch/utils/tensorboard/writer.py) and
#: tensorboardX's (tensorboardX/writer.py, which torch's was made from: the same ``file_writer``,
#: ``all_writers`` and lazy ``_get_file_writer``).
TENSORBOARD_WRITERS = ("torch.utils.tensorboard.writer", "tensorboardX.writer")


def _summary_writer_reduce(writer: Any) -> tuple:
    """A ``SummaryWriter``: its events so far are flushed to its event files, and it travels as
    its settings, as after its ``close()``: its next ``add_*`` opens a new event file in the same
    ``log_dir`` (``_get_file_writer``), which TensorBoard reads as the same run. Its writers hold
    a thread and an open file of this process: a placeholder for them broke the next
    ``add_scalar`` of a training loop, and events still queued were lost with the pod."""
    state = dict(vars(writer))
    for file_writer in (state.pop("all_writers", None) or {}).values():
        file_writer.flush()
    state.pop("file_writer", None)
    return _summary_writer, (type(writer), state)


def _summary_writer(cls: type, state: dict[str, Any]) -> Any:
    writer = cls.__new__(cls)
    writer.__dict__.update(state, file_writer=None, all_writers=None)
    return writer


class LiveObjects:
    """Reductions for one graph (the types are looked up once, from ``sys.modules``)."""

    def __init__(self) -> None:
        data = sys.modules.get("torch.utils.data.dataloader")
        self._iterator = getattr(data, "_BaseDataLoaderIter", None)
        self._loader = getattr(data, "DataLoader", None)
        sqlite3 = sys.modules.get("sqlite3")
        self._connection = getattr(sqlite3, "Connection", None)
        self._bar = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
        self._notebook_bar = getattr(sys.modules.get("tqdm.notebook"), "tqdm_notebook", None)
        self._memmap = getattr(sys.modules.get("numpy"), "memmap", None)
        self._arrow_file = getattr(sys.modules.get("datasets.table"), "MemoryMappedTable", None)
        self._summary_writers = tuple(
            writer for module in TENSORBOARD_WRITERS
            if (writer := getattr(sys.modules.get(module), "SummaryWriter", None)) is not None)
        self._csv_writer = getattr(sys.modules.get("_csv"), "Writer", None)
        self._temporary = getattr(sys.modules.get("tempfile"), "TemporaryDirectory", None)
        self._thread_pool = getattr(sys.modules.get("concurrent.futures.thread"),
                                    "ThreadPoolExecutor", None)
        self._process_pools = tuple(
            pool for module, name in PROCESS_POOLS
            if (pool := getattr(sys.modules.get(module), name, None)) is not None)
        self._any = tuple(t for t in (self._iterator, self._loader, self._connection, self._bar,
                                      self._memmap, self._arrow_file, self._csv_writer,
                                      self._temporary, self._thread_pool) if t
                          ) + self._summary_writers + self._process_pools + LOCKS + (STREAMS,)
        self._streams = {id(stream): name for name in STANDARD_STREAMS
                         if (stream := getattr(sys, name, None)) is not None
                         and name not in redirected_streams()}

    def reduce(self, obj: object, note: RecordNote) -> tuple | None:
        """A reduce tuple for a standard stream, a DataLoader, its iterator or a sqlite3
        connection, else None; what does not travel is noted in ``note``."""
        stream = self._streams.get(id(obj))
        if stream is not None:
            return _standard_stream, (stream,)
        if not isinstance(obj, self._any):  # every object of the graph: one check
            return None
        if self._loader is not None and isinstance(obj, self._loader):
            return _loader_reduce(obj, note)
        if self._bar is not None and isinstance(obj, self._bar):
            return self._bar_reduce(obj)
        if self._memmap is not None and isinstance(obj, self._memmap):
            return _memmap_reduce(obj, note)
        if self._arrow_file is not None and isinstance(obj, self._arrow_file):
            return _arrow_file_reduce(obj)
        if isinstance(obj, self._summary_writers):
            return _summary_writer_reduce(obj)
        if self._temporary is not None and isinstance(obj, self._temporary):
            return _temporary_directory_reduce(obj, note)
        reduced, reason = self._carried(obj)
        if reason is not None:
            return note.placeholder(obj, reason)
        return reduced

    def _bar_reduce(self, bar: Any) -> tuple | None:
        """A tqdm bar writing to a standard stream: its counters and settings, with the stream's
        name; ``None`` (pickled as it is, named if it cannot be) for one writing elsewhere.
        A notebook bar's widget (tqdm/notebook.py: an ipywidgets box whose comm is this
        kernel's) travels as what it shows: whether there is one, its colour and bar style."""
        state = dict(vars(bar))
        out = state.pop("fp", None)
        printed = _printed_length(state.pop("sp", None))[0]
        stream = None if out is None else self._streams.get(id(vars(out).get("_wrapped", out)))
        if out is not None and stream is None:
            return None
        widget = None
        if self._notebook_bar is not None and isinstance(bar, self._notebook_bar):
            container = state.pop("container", None)
            for drawn_by_it in ("disp", "display", "displayed"):
                state.pop(drawn_by_it, None)
            progress = container.children[-2] if container is not None else None
            widget = {"drawn": container is not None, "colour": bar.colour,
                      "bar_style": getattr(progress, "bar_style", "")}
        return _progress_bar, (type(bar), stream, state, widget, printed)

    def reason(self, obj: object) -> str | None:
        """Why ``obj`` does not travel (a DataLoader iterator, a sqlite3 connection or a file
        that cannot be reopened), else why not by ``placeholders.uncapturable_reason``, or None:
        the checkpoint names such a top-level variable as not saved."""
        if id(obj) in self._streams:  # pickled by its name
            return None
        reduced, reason = self._carried(obj)
        return None if reduced is not None else reason or uncapturable_reason(obj)

    def _carried(self, obj: object) -> tuple[tuple | None, str | None]:
        if isinstance(obj, LOCKS):
            return _lock_reduce(obj)
        if isinstance(obj, FILES):
            return _file_reduce(obj)
        if isinstance(obj, STREAMS) and _closed(obj):
            return _closed_stream_reduce(obj)
        if self._iterator is not None and isinstance(obj, self._iterator):
            return _iterator_reduce(obj)
        if self._connection is not None and isinstance(obj, self._connection):
            return _connection_reduce(obj)
        if self._csv_writer is not None and isinstance(obj, self._csv_writer):
            return _csv_writer_reduce(obj)
        if self._thread_pool is not None and isinstance(obj, self._thread_pool):
            return _thread_pool_reduce(obj)
        if isinstance(obj, self._process_pools):
            return None, WORKER_POOL
        return None, None


def _temporary_directory_reduce(directory: Any, note: RecordNote) -> tuple | None:
    """A ``tempfile.TemporaryDirectory`` whose directory exists: its finalizer deletes it when
    this kernel stops (the pause stops it), and a new pod has another ``/tmp``. It comes back as
    an existing, empty directory at the same path, with its finalizer; files in it are named.
    One already cleaned up pickles as it is."""
    path = getattr(directory, "name", None)
    if not isinstance(path, str) or not os.path.isdir(path):
        return None
    count, size = 0, 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, name)).st_size
                count += 1
    if count:
        from jupyter_gkeresume.units import human_bytes

        note.without("temporary directory", (
            f"{path[:SHOWN_CHARS]} with {count} file{'s' * (count != 1)} ({human_bytes(size)}): "
            "deleted when this kernel stops, and not on the next pod; it comes back empty (keep "
            "files on the home volume or in a directory of c.GkeResume.extra_paths)"))
    return _temporary_directory, (type(directory), path), dict(vars(directory))


def _temporary_directory(cls: type, path: str) -> Any:
    """The directory again (owner-only, as ``mkdtemp`` makes it), where its parent exists."""
    with contextlib.suppress(OSError):
        os.mkdir(path, 0o700)
    return cls.__new__(cls)


def _thread_pool_reduce(pool: Any) -> tuple[tuple | None, str | None]:
    """An idle ``ThreadPoolExecutor``: a new pool with its settings (shut down if it was),
    whose threads start at its first task as any pool's do. One with work queued or running,
    or broken (an initializer failed), is named: that work stops with this kernel."""
    if pool._broken:
        return None, f"a broken thread pool: {pool._broken}"[:SHOWN_CHARS]
    finished = pool._shutdown and not any(t.is_alive() for t in pool._threads)
    if not finished and not pool_idle(pool):
        return None, "a thread pool with work queued or running: that work stops with this kernel"
    settings = (pool._max_workers, pool._thread_name_prefix, pool._initializer, pool._initargs)
    return (_thread_pool, (type(pool), settings, pool._shutdown)), None


def _thread_pool(cls: type, settings: tuple, shut_down: bool) -> Any:
    pool = cls(*settings)
    if shut_down:
        pool.shutdown(wait=False)
    return pool


#: The settings of a csv dialect (``csv.Dialect``), as ``csv.writer`` takes them.
CSV_DIALECT = ("delimiter", "doublequote", "escapechar", "lineterminator", "quotechar", "quoting",
               "skipinitialspace", "strict")


def _csv_writer_reduce(writer: Any) -> tuple[tuple | None, str | None]:
    """A ``csv.writer``: a new one on the same stream with the same dialect (it keeps no state
    between rows). The C writer does not show its stream; the bound ``write`` it calls is among
    what it holds (``gc.get_referents``: its dialect and that method), and the stream travels
    as itself (an open file, a standard stream, a ``StringIO``)."""
    import gc

    writes = [held for held in gc.get_referents(writer)
              if getattr(held, "__name__", None) == "write" and hasattr(held, "__self__")]
    if len(writes) != 1:
        return None, "a csv writer whose stream cannot be told"
    dialect = {name: getattr(writer.dialect, name) for name in CSV_DIALECT}
    return (_csv_writer, (writes[0].__self__, dialect)), None


def _csv_writer(stream: Any, dialect: dict[str, Any]) -> Any:
    import csv

    return csv.writer(stream, **dialect)


def _lock_reduce(lock: Any) -> tuple[tuple | None, str | None]:
    """A lock nobody holds has no state but that: a new one takes its place at resume (held in
    a thread-safe cache, a ``queue.Queue``, an ``Event``, these came back as placeholders and
    broke ``with self._lock:``). A held one is named: its holder does not come back."""
    if _held(lock):
        return None, "a lock held at the pause: whoever holds it stays on the old pod"
    return ((_thread.allocate_lock, ()) if type(lock) is _thread.LockType
            else (type(lock), ())), None


def _closed(stream: Any) -> bool:
    try:
        return stream.closed
    except ValueError:  # a wrapper whose buffer was detached
        return False


def _held(lock: Any) -> bool:
    """A plain lock says so; a reentrant one only in its repr before Python 3.14."""
    locked = getattr(lock, "locked", None)
    return locked() if locked is not None else not repr(lock).startswith("<unlocked")


def _file_reduce(stream: Any) -> tuple[tuple | None, str | None]:
    """``(reduce tuple, None)`` to open ``stream``'s file again at resume (a closed one comes back
    closed, with its name and mode), or ``(None, why not)``."""
    try:
        raw = _raw_of(stream)
        closed = stream.closed
    except ValueError as exc:  # a wrapper whose buffer was detached
        return None, f"a file detached from its buffer ({exc})"
    if not isinstance(raw, io.FileIO):  # over memory (BytesIO), a socket, a gzip file: no file
        return _closed_stream_reduce(stream) if closed else (None, None)
    text = _text_settings(stream)
    # open() gives a text file the mode it was given; one built over a buffer has none
    mode = getattr(stream, "mode", raw.mode.replace("b", "") if text else raw.mode)
    opened = (mode, text, stream is not raw)
    if closed:
        return (closed_file, (raw.name, *opened)), None
    try:
        descriptor = raw.fileno()
        opened_file = os.fstat(descriptor)
    except OSError as exc:  # its descriptor is gone
        return None, f"an open file that cannot be read ({type(exc).__name__}: {exc})"
    path = _path_of(descriptor, opened_file, raw.name)
    shown = repr(path)[:SHOWN_CHARS]
    if path != os.devnull:
        if path is None or not stat.S_ISREG(opened_file.st_mode):
            return None, "an open pipe, socket or descriptor belongs to this process"
        if not comes_back(path):
            return None, (f"an open file {shown} outside the home volume: it stays on the old "
                          "pod (keep it under the home directory)")
    try:
        if raw.writable():
            stream.flush()
        position = stream.tell() if stream.seekable() else None
    except OSError as exc:  # a text file read with next(): its position cannot be told
        return None, f"an open file {shown} whose position cannot be read ({exc})"
    return (reopen_file, (path, *opened, position)), None


def _text_settings(stream: Any) -> dict[str, Any] | None:
    if not isinstance(stream, io.TextIOWrapper):
        return None
    return {"encoding": stream.encoding, "errors": stream.errors,
            "line_buffering": stream.line_buffering, "write_through": stream.write_through}


#: ``GzipFile.mode`` before Python 3.13: ``gzip.READ`` and ``gzip.WRITE``, numbers.
GZIP_MODES = {1: "rb", 2: "wb"}


def _closed_stream_reduce(stream: Any) -> tuple[tuple | None, str | None]:
    """A closed stream ``open()`` does not make (what ``with gzip.open(...) as f`` leaves in
    ``f``; one over memory aside, whose contents are gone): what it shows, its name and mode, on
    a closed file of the ``io`` module (a ``GzipFile`` becomes a ``BufferedReader``)."""
    raw = _raw_of(stream)
    if isinstance(raw, IN_MEMORY):
        return None, None
    text = _text_settings(stream)
    mode = getattr(stream, "mode", None)
    try:
        name = raw.name
    except (AttributeError, ValueError):
        name = None
    mode = GZIP_MODES.get(mode, mode) if type(mode) is int else mode
    if not isinstance(mode, str) or mode.strip("rwaxbt+") or not mode:
        mode = "r" if text else "rb"
    return (closed_file, (name, mode, text, True)), None


def _raw_of(stream: Any) -> Any:
    """The raw stream under a file ``open()`` returned (text, buffered or unbuffered): a
    ``FileIO``, or what a wrapper was built over (``BufferedWriter(BytesIO())``)."""
    if isinstance(stream, io.TextIOWrapper):
        stream = stream.buffer
    return stream if isinstance(stream, io.FileIO) else getattr(stream, "raw", stream)


def _path_of(descriptor: int, opened: os.stat_result, name: object) -> str | None:
    """The file a descriptor has open (``opened``: its ``fstat``): the name given to ``open()``
    (made absolute) while it still names that file (a symlinked home keeps its own path), else
    what ``/proc`` says (the cwd changed since a relative name was given); None for a deleted
    file."""
    if isinstance(name, str):
        given = os.path.abspath(name)
        try:
            if os.path.samestat(os.stat(given), opened):
                return given
        except OSError:
            pass
    try:
        path = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


def reopen_file(path: str, mode: str, text: dict[str, Any] | None, buffered: bool,
                position: int | None) -> Any:
    """At resume: the file open again (never created, never truncated), at its position."""
    if path != os.devnull and not os.path.isfile(path):
        raise FileNotFoundError(f"the open file {path!r} is not here")
    stream = _open_existing(path, mode, text, buffered)
    if position is not None:
        stream.seek(position)
    return stream


def closed_file(name: object, mode: str, text: dict[str, Any] | None, buffered: bool) -> Any:
    """At resume: a closed file of that name and mode (what ``with open(...) as f`` leaves in
    ``f``), which is all a closed file shows; its file is not touched."""
    stream = _open_existing(os.devnull, mode, text, buffered)
    _raw_of(stream).name = name
    stream.close()
    return stream


def _open_existing(path: str, mode: str, text: dict[str, Any] | None, buffered: bool) -> Any:
    """``open()`` with the file's settings, on a file that exists, which is never truncated."""

    def existing(file: str, flags: int) -> int:
        return os.open(file, flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC))

    if text is None:
        return open(path, mode, buffering=-1 if buffered else 0, opener=existing)
    stream = open(path, mode, encoding=text["encoding"], errors=text["errors"], opener=existing)
    stream.reconfigure(line_buffering=text["line_buffering"], write_through=text["write_through"])
    return stream


#: torch's samplers (torch/utils/data/sampler.py, distributed.py), each of which fixes an epoch's
#: order when its iteration starts (``RandomSampler`` draws more as it goes only with
#: ``replacement`` or more samples than data: ``_fixes_its_order``).
FIXED_ORDER_SAMPLERS = frozenset({
    ("torch.utils.data.sampler", name) for name in (
        "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler")
} | {("torch.utils.data.distributed", "DistributedSampler")})


_BATCH_SAMPLER = ("torch.utils.data.sampler", "BatchSampler")


def _iterator_reduce(iterator: Any) -> tuple[tuple | None, str | None]:
    """A DataLoader iterator without workers over a sampler that fixes its order: its state and
    the rest of its epoch's batches, read now (and this session goes on from that list), or
    ``None`` where it has not started (``_iterator_state``); else why it does not travel."""
    state = dict(vars(iterator))
    order = state.pop("_sampler_iter", None)
    if (type(iterator).__name__ != "_SingleProcessDataLoaderIter"
            or not _fixes_its_order(state.get("_index_sampler"))):
        return None, _iterator_reason(iterator)
    rest = None
    if not (inspect.isgenerator(order)
            and inspect.getgeneratorstate(order) == inspect.GEN_CREATED):
        rest = list(order)
        iterator._sampler_iter = iter(rest)
    return (copyreg.__newobj__, (type(iterator),), (state, rest), None, None,
            _iterator_state), None


def _fixes_its_order(sampler: Any) -> bool:
    if (type(sampler).__module__, type(sampler).__qualname__) == _BATCH_SAMPLER:
        sampler = sampler.sampler
    kind = type(sampler)
    if (kind.__module__, kind.__qualname__) not in FIXED_ORDER_SAMPLERS:
        return False
    return kind.__qualname__ != "RandomSampler" or sampler.generator is None or not (
        sampler.replacement or sampler.num_samples > len(sampler.data_source))


def _iterator_state(iterator: Any, state: tuple[dict[str, Any], list | None]) -> None:
    """State setter of a DataLoader iterator: its state, then the rest of its epoch, or a new
    iteration of its sampler where it had not started (``_iterator_reduce``)."""
    values, rest = state
    vars(iterator).update(values)
    iterator._sampler_iter = iter(iterator._index_sampler if rest is None else rest)


def _iterator_reason(iterator: Any) -> str:
    done = getattr(iterator, "_num_yielded", 0)
    try:
        of = f" of {len(iterator)}"
    except TypeError:  # an IterableDataset without __len__
        of = ""
    workers = [w.pid for w in getattr(iterator, "_workers", []) if w.pid is not None]
    held = (f", {len(workers)} worker processes ({', '.join(map(str, workers))}) stay on this pod"
            if workers else "")
    return (f"a DataLoader iterator at batch {done}{of}{held}: it does not come back "
            "(its DataLoader does: iterate it again)")


def _loader_reduce(loader: Any, note: RecordNote) -> tuple | None:
    """The loader as pickle reduces it, without its persistent workers' iterator; the resume
    starts the workers again (``_start_workers``)."""
    if vars(loader).get("_iterator") is None:
        return None
    make, args, state, *rest = loader.__reduce_ex__(5)
    if not isinstance(state, dict) or any(rest):
        return None
    note.without("DataLoader worker processes", (
        f"its {loader.num_workers} persistent workers start again at the resume, seeded anew: "
        "random numbers drawn inside them (random augmentations of the dataset) differ from an "
        "uninterrupted run"))
    return (make, args, {**state, "_iterator": None}, None, None, _loader_with_workers)


def _loader_with_workers(loader: Any, state: dict[str, Any]) -> None:
    """State setter of a persistent loader: its state, and its workers started once the whole
    session is back (``rebuild.Loading.after``)."""
    vars(loader).update(state)
    loading = current_loading()
    if loading is not None:
        loading.after.append(("the persistent workers of a DataLoader",
                              functools.partial(_start_workers, loader)))


def _start_workers(loader: Any) -> None:
    """Start a loader's persistent workers as its first iteration does, leaving every random
    generator it draws from as it was. An uninterrupted session draws nothing there (its
    iterator lives on: the next epoch only resets it), while creating one draws the workers'
    base seed and, prefetching, the sampler's order; drawn from the global generator, that
    moved the session's whole random stream (every later shuffle and dropout differed)."""
    import torch

    owners = (loader, loader.sampler, loader.batch_sampler,
              getattr(loader.batch_sampler, "sampler", None))
    generators = {id(g): g for owner in owners
                  if isinstance(g := getattr(owner, "generator", None), torch.Generator)}
    states = [(generator, generator.get_state()) for generator in generators.values()]
    try:
        with torch.random.fork_rng(devices=[]):
            loader._iterator = loader._get_iterator()
    finally:
        for generator, state in states:
            generator.set_state(state)


def _connection_reduce(connection: Any) -> tuple[tuple | None, str | None]:
    """``(reduce tuple, None)`` to reopen the connection's file or to rebuild its in-memory
    database from its bytes, or ``(None, why not)``."""
    try:
        databases = connection.execute("PRAGMA database_list").fetchall()
        temporary = connection.execute("SELECT count(*) FROM temp.sqlite_master").fetchone()[0]
    except Exception as exc:  # closed, or in use by another thread
        return None, f"a sqlite3 connection that cannot be read ({type(exc).__name__}: {exc})"
    main = next((row[2] for row in databases if row[1] == "main"), "")
    shown = repr(main)[:120] if main else "an in-memory database"
    if connection.in_transaction:
        return None, (f"a sqlite3 connection to {shown} with uncommitted changes: commit them "
                      "before the pause, or they are lost")
    if len(databases) > 2 or temporary:
        return None, (f"a sqlite3 connection to {shown} with attached databases or temporary "
                      "tables, which a reopened connection would not have")
    settings = (connection.isolation_level, connection.row_factory)
    if not main:
        if not hasattr(connection, "serialize"):  # Python 3.10, or sqlite built without it
            return None, ("a sqlite3 connection to an in-memory database, which this Python "
                          "cannot serialize (3.11 can): its contents are lost")
        return (reopen_sqlite, (":memory:", *settings, connection.serialize())), None
    if not comes_back(main):
        return None, (f"a sqlite3 connection to {shown}, outside the home volume: the next pod "
                      "will not have the file (keep it under the home directory)")
    return (reopen_sqlite, (main, *settings)), None


def reopen_sqlite(path: str, isolation_level: str | None, row_factory: Any,
                  content: bytes | None = None) -> Any:
    """At resume: the connection open again on its database file (never a new empty one), or,
    with ``content`` (``Connection.serialize()`` at the checkpoint), a new in-memory database
    holding those bytes."""
    import sqlite3

    if content is None and not os.path.isfile(path):
        raise FileNotFoundError(f"the sqlite3 database {path!r} is not here")
    connection = sqlite3.connect(path, isolation_level=isolation_level)
    if content is not None:
        connection.deserialize(content)
    connection.row_factory = row_factory
    return connection
