"""The namespace as one object graph: a pickle stream with one record per top-level name.

``write_graph`` pickles each name with ONE cloudpickle pickler, so its memo spans the names: ``b
is a``, an optimizer holding the model's parameters, tied weights all survive. Storages leave
through the reducer (``StorageCollector.reduce``); live resources become ``Uncaptured``
placeholders; registered app checkpoints replace their objects; tensors keep their gradients and
optimizers their LR scheduler's ``step`` wrapper (``torch_reduce``); DataLoaders, their iterators
and sqlite3 connections go through ``live_objects``, what pickle refuses but its constructor's
arguments make again through ``remade``, weak references and weak containers through
``weak_references``, a dict's views (``d.keys()``, ``MappingProxyType(d)``) as views of the
restored dict, a memoryview as a view of its restored exporter, accelerate's process states and
the kernel's own objects (the shell, the event loop) through ``singletons``, matplotlib's callback
registries with the notebook's callbacks through ``callbacks``.
A name whose pickling raises is dropped and the stream is rebuilt without it, so one bad
object never sinks the snapshot.

Functions defined in the notebook (whose globals are the namespace itself: cells, lambdas,
closures, methods of notebook classes) pickle by value as cloudpickle does, except that their
globals are not written as a private dict: on restore they are bound to the namespace they come
back into (``rebuild.notebook_function``), so redefining a global or a helper takes effect as it
did before the pause. A function of another dict that also says ``__main__`` (``exec(src, d)``)
keeps globals of its own, as cloudpickle writes them. The values they referenced are kept and
fill only the names that namespace lacks (``rebuild.Loading``). Their code keeps its file name
(the cell's), where cloudpickle writes ``<dynamic-code>``.

``read_graph`` loads the records back in order with one unpickler (the verbs pause the cyclic
garbage collector, ``kernel_hooks.collector``: a namespace of many small objects would otherwise
trigger a collection every few hundred allocations, each walking the whole heap: measured 0.5-2 s
of a 2-3 s resume). If a record fails (say, its class's library is gone), reading resumes at the
next record with a fresh unpickler that has the memo so far (``_RecordUnpickler.after``). Of the
failed record's memo entries only the imported globals (classes, functions: complete objects, which
later records reference wherever this one named them first) and strings stay; every other object it
built may be half made and becomes a placeholder, so a record that depended on one fails or carries
it visibly. The rest load.
"""

from __future__ import annotations

import array
import copyreg
import enum
import functools
import gc
import importlib
import io
import mmap
import operator
import pickle
import pickletools
import struct
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from . import rebuild, registry, weak_references
from .callbacks import CallbackRegistries
from .left_behind import held_key
from .live_objects import LiveObjects
from .placeholders import SHOWN_CHARS, Uncaptured, type_name, uncapturable_reason
from .remade import Remade
from .singletons import AccelerateStates, GlobalGenerators, KernelSingletons
from .storages import StorageCollector
from .torch_reduce import TorchReductions

PROTOCOL = 5
MAX_REBUILDS = 8
_BY_REFERENCE = (type, types.FunctionType, types.BuiltinFunctionType)
#: Pickled as pickle does, asked nothing: the builtin containers and values.
_PLAIN = frozenset({dict, list, tuple, set, frozenset, str, bytes, bytearray, complex, int, float})


@dataclass
class RecordNote:
    """What pickling one top-level name found: placeholders inside it (``(type, reason)``, each
    once; ``held``: the ``left_behind.held_key`` of each thread and child process among them),
    modules it needs."""

    uncaptured: list[tuple[str, str]] = field(default_factory=list)
    held: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)

    def without(self, kind: str, reason: str) -> tuple[str, str]:
        """Note once that the record comes back without ``kind`` (it travels otherwise, or not)."""
        part = (kind, reason)
        if part not in self.uncaptured:
            self.uncaptured.append(part)
        return part

    def placeholder(self, obj: object, reason: str) -> tuple:
        """The reduce tuple of an ``Uncaptured`` stand-in for ``obj``, noted once."""
        part = self.without(type_name(obj), reason)
        key = held_key(obj)
        if key is not None:
            self.held[key] = part
        return (Uncaptured, part)


class _GraphPickler(cloudpickle.Pickler):
    def __init__(self, file: io.BytesIO, collector: StorageCollector,
                 namespace: Mapping[str, Any] | None = None):
        # cloudpickle's table is a ChainMap of its reducers over copyreg's, which pickle asks,
        # in Python, for every object's type; the same in one dict are asked in C (__init__
        # reads it). The copy is of the reducers registered when the graph's writing starts.
        self.dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        super().__init__(file, protocol=PROTOCOL)
        self.collector = collector
        self.namespace = namespace  # whose functions are bound to the one restored into
        self.torch = TorchReductions(PROTOCOL)
        self.live = LiveObjects()
        self.remade = Remade()
        self.accelerate = AccelerateStates()
        self.callbacks = CallbackRegistries()
        self.kernel = KernelSingletons()
        self.generators = GlobalGenerators()
        self.note = RecordNote()
        self._app_saving: set[int] = set()
        self._forwarding: dict[type, bool] = {}  # _forwards_attributes, once per class
        self._making: dict[type, str] = {}  # _how_made, once per class

    def reducer_override(self, obj: object) -> Any:
        """Called by pickle for every non-atomic object not yet in the memo: keep it lean."""
        kind = type(obj)
        if kind in _PLAIN or (kind is OrderedDict and registry.for_object(obj) is None):
            # an exact OrderedDict too, unless a registered checkpoint claims it: every
            # nn.Module holds eleven (its hook tables), two thirds of a model's objects
            return NotImplemented
        reduced = weak_references.reduce(obj)  # first: a dead proxy raises on isinstance
        if reduced is not None:
            return reduced
        reduced = self.collector.reduce(obj)
        if reduced is not None:
            if reduced[0] is Uncaptured:
                return self.note.placeholder(obj, reduced[1][1])
            return reduced
        app = registry.for_object(obj)
        if app is not None and id(obj) not in self._app_saving:
            self._app_saving.add(id(obj))
            try:
                return (app.load, (app.save(obj),))
            finally:
                self._app_saving.discard(id(obj))
        reduced = (self.kernel.reduce(obj) or self.live.reduce(obj, self.note)
                   or self.remade.reduce(obj, self.note))
        if reduced is not None:
            return reduced
        reason = uncapturable_reason(obj)
        if reason is not None:
            return self.note.placeholder(obj, reason)
        reduced = (self.torch.reduce(obj, self.note) or self.accelerate.reduce(obj)
                   or self.callbacks.reduce(obj) or self.generators.reduce(obj))
        if reduced is not None:
            return reduced
        if isinstance(obj, _BY_REFERENCE):
            module = getattr(obj, "__module__", None)
            if (isinstance(module, str) and module not in ("__main__", "builtins")
                    and (kind is types.BuiltinFunctionType or _by_reference(obj))):
                # only what is pickled by reference needs its module where the resume runs: a
                # namedtuple's __new__ says "namedtuple_Point" and travels by value
                self.note.modules.add(module.split(".", 1)[0])
        if kind is types.CodeType:
            return _code_in_its_file(obj)
        if kind is memoryview:
            return _memory_view_reduce(obj, self.note)
        if kind in _MAPPING_VIEWS:  # a view of its dict, not cloudpickle's copy of its contents
            return _MAPPING_VIEWS[kind], tuple(gc.get_referents(obj))
        if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is obj:
            # a subclass of ModuleType (torch's config modules), which cloudpickle's dispatch on
            # the exact type misses: by its name, as cloudpickle pickles a plain module
            self.note.modules.add(obj.__name__.split(".", 1)[0])
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, BaseException) and kind not in self.dispatch_table:
            reduced = _exception_reduce(obj, self.note)
            if reduced is not None:
                return reduced
        if kind is _LRU_CACHED and not _importable(obj) and not _by_reference(obj.__wrapped__):
            return _lru_cached_by_value(obj, self.note)
        if kind is _CACHED_PROPERTY:
            return rebuild.cached_property, (obj.func, obj.attrname)
        if kind is types.FunctionType and _is_single_dispatch(obj) and not _by_reference(obj):
            return rebuild.single_dispatch, (dict(vars(obj)["registry"]),)
        forwards = self._forwarding.get(kind)
        if forwards is None:
            forwards = self._forwarding[kind] = _forwards_attributes(kind)
        if forwards:
            return _with_dict_set_directly(obj)
        made = self._making.get(kind)
        if made is None:  # a reducer registered for the type (copyreg.pickle) goes first
            made = self._making[kind] = "" if kind in self.dispatch_table else _how_made(kind)
        if made and not isinstance(obj, type):
            reduced = _made_past_its_new(obj) if made == "new" else _made_past_its_init(obj)
            if reduced is not None:
                return reduced
        reduced = super().reducer_override(obj)
        if isinstance(obj, type) and reduced is not NotImplemented and reduced[0] is _SKELETON:
            return _quiet_skeleton(obj, reduced)
        return reduced

    def _dynamic_function_reduce(self, func: types.FunctionType) -> Any:
        """cloudpickle's by-value reduction; a notebook function's globals become a reference
        to the user namespace and its referenced globals are deferred (module docstring). A
        function of another dict that also says ``__main__`` (``exec(src, d)``, the copy of the
        namespace ``torch.utils.benchmark.Timer(globals=globals())`` compiles over) keeps
        globals of its own, as cloudpickle pickles them."""
        reduced = super()._dynamic_function_reduce(func)
        if func.__globals__.get("__name__") != "__main__" or (
                self.namespace is not None and func.__globals__ is not self.namespace):
            return reduced
        _make, (code, _private_globals, name, defaults, closure), state, *_ = reduced
        return (rebuild.notebook_function, (code, name, defaults, closure), state, None, None,
                rebuild.notebook_function_state)


_LRU_CACHED = type(functools.lru_cache(lambda: None))
#: The live views of a mapping: a dict's or OrderedDict's (``d.keys()`` ...) and a read-only
#: ``MappingProxyType(d)``, each made again over the restored mapping, the one object it refers
#: to (``gc.get_referents``). (A class's ``vars()`` comes back a copy, as cloudpickle makes it.)
_MAPPING_VIEWS: dict[type, Callable[[Any], Any]] = {
    type(getattr(mapping, method)()): operator.methodcaller(method)
    for mapping in ({}, OrderedDict()) for method in ("keys", "values", "items")}
_MAPPING_VIEWS[types.MappingProxyType] = types.MappingProxyType
_SKELETON = cloudpickle.cloudpickle._make_skeleton_class
_CACHED_PROPERTY = functools.cached_property
_by_reference = cloudpickle.cloudpickle._should_pickle_by_reference


def _importable(obj: Any) -> bool:
    """Whether pickle finds ``obj`` (not a function or class) as the attribute its module and
    qualified name say, in a module not registered to pickle by value: a library's
    ``functools.cache`` function, whose ``__wrapped__`` alone is not its module's attribute."""
    found = cloudpickle.cloudpickle._lookup_module_and_qualname(obj)
    return found is not None and not cloudpickle.cloudpickle._is_registered_pickle_by_value(found[0])


_OBJECT_GETSTATE = getattr(object, "__getstate__", None)  # Python 3.11+
#: What makes a class pickle otherwise than by its ``__dict__`` alone.
_OWN_PICKLING = ("__setstate__", "__getnewargs__", "__getnewargs_ex__")


def _forwards_attributes(kind: type) -> bool:
    """A class with ``__getattr__`` that pickles as ``object`` does (``__dict__`` as its state,
    no ``__setstate__``): pickle's load looks ``__setstate__`` up on the half-made instance, and
    a ``__getattr__`` that forwards to an attribute not set yet recurses until it fails
    (tqdm/utils.py ``ObjectWrapper``, around every bar's stream: no progress bar came back)."""
    return (getattr(kind, "__getattr__", None) is not None
            and kind.__reduce_ex__ is object.__reduce_ex__ and kind.__reduce__ is object.__reduce__
            and getattr(kind, "__getstate__", _OBJECT_GETSTATE) is _OBJECT_GETSTATE
            and not any(getattr(kind, name, None) for name in _OWN_PICKLING)
            and kind.__new__ is object.__new__ and kind not in copyreg.dispatch_table
            and not any(vars(base).get("__slots__") for base in kind.__mro__)
            and not issubclass(kind, list | dict))


def _with_dict_set_directly(obj: object) -> tuple:
    state = object.__getattribute__(obj, "__dict__")
    return (copyreg.__newobj__, (type(obj),), dict(state) or None, None, None,
            rebuild.instance_dict)


def _exception_reduce(exception: BaseException, note: RecordNote) -> tuple | None:
    """An exception made again as pickle would (``type(e)(*e.args)``), or without its
    ``__init__`` where that call fails (a notebook's ``MyError(code, detail)`` that passes only
    ``code`` on: it was saved, then not restored), with its cause and context (``raise ... from``,
    an error raised while handling another), which its own pickling drops. Its traceback holds
    the frames it was raised in, this process's: named. None: an exception that pickles its own
    way (its own ``__reduce__``)."""
    reduced = exception.__reduce_ex__(PROTOCOL)
    if not isinstance(reduced, tuple) or len(reduced) > 3 or reduced[0] is not type(exception):
        return None
    if exception.__traceback__ is not None:
        note.without("traceback", (
            "the frames it was raised in belong to this process: the exception comes back with "
            "its type, message, cause and context, without its traceback"))
    state = (reduced[2] if len(reduced) > 2 else None, exception.__cause__,
             exception.__context__, exception.__suppress_context__)
    return rebuild.instance_of, (reduced[0], reduced[1]), state, None, None, rebuild.exception_state


def _how_made(kind: type) -> str:
    """``"new"``: the class has a ``__new__`` written in Python (``_made_past_its_new``);
    ``"init"``: it pickles with a base's ``__reduce__``, which may ask to call the class with what
    its own ``__init__`` does not take, and may leave out what is set on the instance
    (``_made_past_its_init``); ``""``: pickled as it is."""
    if issubclass(kind, enum.Enum):  # a member pickles as a lookup by value: the very member
        return ""
    if type(getattr(kind, "__new__", None)) is types.FunctionType:
        return "new"
    base = rebuild.reducing_base(kind)
    return "init" if base is not kind and base is not object else ""


def _made_past_its_init(obj: object) -> tuple | None:
    """An instance its base's ``__reduce__`` makes by calling its class (``OrderedDict``,
    ``Counter``, ``deque``, ``defaultdict``), made by ``rebuild.instance_of``: the same call, or
    where the class's ``__init__`` wants other arguments, as the base makes one. Such an instance
    (``class Vocab(OrderedDict)`` whose ``__init__`` takes the tokens) was saved and then not
    restored. The attributes set on it travel too, where the base's reduction leaves them out
    (``Counter``'s, ``defaultdict``'s)."""
    reduced = obj.__reduce_ex__(PROTOCOL)
    if not isinstance(reduced, tuple) or reduced[0] is not type(obj):
        return None
    state = reduced[2] if len(reduced) > 2 else None
    attributes = getattr(obj, "__dict__", None)
    if state is None and attributes:  # Counter's and defaultdict's drop what is set on them
        state = dict(attributes)
    return (rebuild.instance_of, (reduced[0], reduced[1]), state, *reduced[3:])


def _made_past_its_new(obj: object) -> tuple | None:
    """An instance of a class with a ``__new__`` of its own, reduced as pickle does
    (``copyreg.__newobj__``: ``cls.__new__(cls, *args)``, where ``args`` is what the built-in base
    keeps, ``tuple(self)`` for a tuple), made by ``rebuild.new_object``: the same call, or where
    it wants other arguments (``Point(x, y)`` over a tuple, ``Celsius(v, unit)`` over a float),
    the built-in base's ``__new__``. Such an instance was saved and then not restored."""
    reduced = obj.__reduce_ex__(PROTOCOL)
    if not isinstance(reduced, tuple) or reduced[0] is not copyreg.__newobj__:
        return None
    cls, *args = reduced[1]
    return (rebuild.new_object, (cls, tuple(args)), *reduced[2:])


def _quiet_skeleton(cls: type, reduced: tuple) -> tuple:
    """A class pickled by value made again without running the hooks of the notebook's own that
    ran when it was defined (``rebuild.class_skeleton``): the ``__init_subclass__`` of its bases
    pickled by value and the ``__new__`` and ``__init__`` of its metaclass pickled by value. What
    they did (an entry in a registry of the notebook, an attribute set on the class) is in the
    snapshot already; run again at the resume, they did it twice (a plugin registry listed every
    class twice while the verdict said ``exact``). A library's hooks still run (``ABCMeta``'s,
    ``typing.Generic``'s): a library's registry is the resumed process's, which lacks the class."""
    quiet = [(base, "__init_subclass__") for base in cls.__mro__[1:]
             if "__init_subclass__" in vars(base) and not _by_reference(base)]
    quiet += [(meta, name) for meta in type(cls).__mro__ if not _by_reference(meta)
              for name in ("__new__", "__init__") if name in vars(meta)]
    if not quiet:
        return reduced
    return (rebuild.class_skeleton, (quiet, *reduced[1]), *reduced[2:])


def _is_single_dispatch(function: types.FunctionType) -> bool:
    """A ``functools.singledispatch`` function: one of the notebook pickles as its
    implementations by type (its closure holds a ``WeakKeyDictionary`` cache, which does not
    pickle: the name was lost)."""
    attributes = vars(function)
    return isinstance(attributes.get("registry"), types.MappingProxyType) and "dispatch" in attributes


def _lru_cached_by_value(cached: Any, note: RecordNote) -> Any:
    """A ``functools.lru_cache`` (or ``cache``) over a function pickled by value (the notebook's):
    its function and cache parameters; it comes back with an empty cache, which is noted when it
    held results (the C cache has no API to read them: a ``@cache def get_model()`` builds a new
    model at its next call, no longer the one the session trained). Pickle's own reduction names
    it by reference (``__main__.f``), which no resume can import: the record would fail and the
    name be lost."""
    held = cached.cache_info().currsize
    if held:
        note.without(
            "functools.lru_cache", f"{cached.__qualname__[:SHOWN_CHARS]}: its cache of {held} "
            f"result{'s' * (held != 1)} comes back empty: each is computed again at its next call")
    parameters = cached.cache_parameters()
    return (rebuild.lru_cached, (cached.__wrapped__, parameters["maxsize"], parameters["typed"]))


def _memory_view_reduce(view: memoryview, note: RecordNote) -> Any:
    """A memoryview as the same view of its exporter (``rebuild.memory_view``: a ``bytearray``,
    an array, ``bytes``, ...), which pickles as itself. cloudpickle pickles it as a ``bytes``
    copy, which came back as ``bytes``: no longer seeing its exporter's changes, nor taking
    writes. A view that this cannot make again (strided, of a format ``cast`` refuses, of an
    exporter not contiguous or without NumPy to read addresses) stays that copy, noted; so does
    a view of anything but the buffers that pickle as themselves (``_EXPORTERS``, NumPy arrays)."""
    try:
        exporter = type(view.obj)
        if exporter not in _EXPORTERS and exporter.__module__.partition(".")[0] != "numpy":
            raise TypeError(exporter)
        offset = _address(view) - _address(memoryview(view.obj))
        made = rebuild.memory_view(view.obj, offset, view.format, view.shape, view.readonly)
        if (made.strides, made.readonly) == (view.strides, view.readonly) and (
                _address(made) == _address(view)):
            return rebuild.memory_view, (view.obj, offset, view.format, view.shape, view.readonly)
    except (TypeError, ValueError, ImportError):
        pass
    note.without("memoryview", f"a view of {type_name(view.obj)} comes back as a copy of its "
                 "bytes (bytes), no longer sharing its memory")
    return bytes, (view.tobytes(),)


_EXPORTERS = frozenset({bytes, bytearray, array.array, mmap.mmap})


def _address(view: memoryview) -> int:
    """Where ``view``'s first byte lies (``TypeError`` or ``ValueError`` if not contiguous)."""
    import numpy

    if not view.c_contiguous:
        raise ValueError("not contiguous")
    return numpy.frombuffer(view.cast("B"), numpy.uint8).ctypes.data if view.nbytes else 0


def _code_in_its_file(code: types.CodeType) -> Any:
    """cloudpickle's code reduction with the code's own file name instead of its
    ``<dynamic-code>``, so notebook code keeps its cell's file name (``ipython_state``)."""
    make, args = cloudpickle.cloudpickle._code_reduce(code)
    return make, (*args[:_FILENAME_AT], code.co_filename, *args[_FILENAME_AT + 1:])


_FILENAME_AT = cloudpickle.cloudpickle._code_reduce(compile("", "<probe>", "exec"))[1].index(
    "<dynamic-code>")


@dataclass
class GraphRecord:
    """One top-level name as written: where its record ends in the stream, what it found."""

    name: str
    value: object
    note: RecordNote
    end: int


def write_graph(
    items: list[tuple[str, object]], collector_factory: Callable[[], StorageCollector],
    stand_in: Callable[[str, str], object | None] | None = None,
    namespace: Mapping[str, Any] | None = None,
) -> tuple[bytes, list[GraphRecord], StorageCollector, dict[str, str]]:
    """Pickle ``items`` (name, value) in order; returns the stream, the records written, the
    collector holding the storages, and the names that failed with their reasons. A failed
    name is dropped, unless ``stand_in(name, why)`` gives a value to write in its place (which
    must pickle: one that fails too is dropped). ``namespace``: the dict the items come from,
    whose functions come back bound to the namespace restored into (without it, every
    function of a ``__main__`` dict does). The verbs call it with the cyclic garbage collector
    paused (``kernel_hooks.collector``)."""
    failed: dict[str, str] = {}
    stand_ins: dict[str, object] = {}
    for _ in range(MAX_REBUILDS):
        buffer = io.BytesIO()
        collector = collector_factory()
        pickler = _GraphPickler(buffer, collector, namespace)
        records: list[GraphRecord] = []
        bad = None
        for name, value in items:
            if name in failed:
                if name not in stand_ins:
                    continue
                value = stand_ins[name]
            pickler.note = RecordNote()
            collector.owner = name
            try:
                pickler.dump(value)
            except Exception as exc:  # any failure is this name's, reported, never fatal
                bad = (name, f"{type(exc).__name__}: {exc}"[:300])
                break
            records.append(GraphRecord(name, value, pickler.note, buffer.tell()))
        if bad is None:
            return buffer.getvalue(), records, collector, failed
        name, why = bad
        if name in failed:
            del stand_ins[name]
            continue
        failed[name] = why
        standing = stand_in(name, why) if stand_in is not None else None
        if standing is not None:
            stand_ins[name] = standing
    # Too many failures to bisect one by one: find every bad name with standalone dry runs.
    for name, value in items:
        if name not in failed and not _pickles_alone(value, collector_factory):
            failed[name] = "cannot be pickled together with the rest"
            standing = stand_in(name, failed[name]) if stand_in is not None else None
            if standing is not None:
                stand_ins[name] = standing
    graph, records, collector, more = write_graph(
        [(n, stand_ins.get(n, v)) for n, v in items if n not in failed or n in stand_ins],
        collector_factory, stand_in, namespace)
    return graph, records, collector, {**failed, **more}


def _pickles_alone(value: object, collector_factory: Callable[[], StorageCollector]) -> bool:
    return _dry_run(value, collector_factory)[0] is None


def why_not_whole(value: object) -> str | None:
    """Why ``value`` cannot come back whole (pickling raises, or a part of it would be an
    ``Uncaptured`` placeholder), or None. A dry run: nothing is kept."""
    failure, note = _dry_run(value, StorageCollector)
    if failure is None and note.uncaptured:
        failure = "; ".join(f"{kind} ({why})" for kind, why in note.uncaptured)
    return failure


def _dry_run(value: object, collector_factory: Callable[[], StorageCollector],
             ) -> tuple[str | None, RecordNote]:
    pickler = _GraphPickler(io.BytesIO(), collector_factory())
    try:
        pickler.dump(value)
    except Exception as exc:  # the reason is the caller's to report
        return f"{type(exc).__name__}: {exc}"[:200], pickler.note
    return None, pickler.note


def read_graph(
    data: bytes | bytearray, ends: list[int], progress: Callable[[int], None] | None = None,
) -> tuple[list[object], dict[int, str], list[Uncaptured]]:
    """Load the records ending at ``ends``; returns the values (None where failed), the failures
    by record index, and the placeholders that stand in for the failed records' objects.
    Storages are served by the loader installed with ``rebuild.loading``. ``progress`` is told
    how many more bytes of the pickle were consumed, as the unpickler reads them (a frame at a
    time, so it moves inside one big record too). The verbs call it with the cyclic garbage
    collector paused (``kernel_hooks.collector``)."""
    reached = _Reached(progress)
    stream = reached.stream(data)
    unpickler = _RecordUnpickler(stream, set())
    values: list[object] = []
    failures: dict[int, str] = {}
    lost: list[Uncaptured] = []
    for index, end in enumerate(ends):
        try:
            values.append(unpickler.load())
            if stream.tell() != end:
                raise pickle.UnpicklingError("record boundary mismatch")
        except Exception as exc:  # a record that cannot load costs only itself and dependents
            values.append(None)
            failures[index] = f"{type(exc).__name__}: {exc}"[:300]
            lost.append(Uncaptured("object", f"part of a record that failed: {failures[index]}"))
            memo = unpickler.memo.copy()
            first, past = _memo_span(data, ends, index)
            for i in range(first, past):  # indices stay dense: placeholders where not kept
                if not unpickler.complete(memo.get(i, lost[-1])):
                    memo[i] = lost[-1]
            stream = reached.stream(data)
            stream.seek(end)
            unpickler = _RecordUnpickler.after(memo, stream, unpickler.found)
    reached(len(data))
    return values, failures, lost


class _RecordUnpickler(pickle.Unpickler):
    """The graph's unpickler: notes the globals it imports (``found``, by id), so that after a
    failed record those can be kept (``complete``)."""

    def __init__(self, file: Any, found: set[int]):
        super().__init__(file)
        self.found = found
        self._priming: list[object] | None = None

    def find_class(self, module: str, name: str) -> Any:
        value = super().find_class(module, name)
        self.found.add(id(value))
        return value

    def complete(self, value: object) -> bool:
        """Whether a memo entry is whole whatever failed after it was made."""
        return type(value) in (str, bytes) or id(value) in self.found

    def persistent_load(self, pid: Any) -> Any:
        if self._priming is None:  # the graph itself has no persistent ids
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        return self._priming[pid]

    @classmethod
    def after(cls, memo: dict[int, object], file: Any, found: set[int]) -> _RecordUnpickler:
        """An unpickler of ``file`` whose memo is ``memo`` (indices 0..n-1). Not ``.memo = memo``:
        CPython's C unpickler then has an empty memo (3.10-3.13, ``Unpickler_set_memo`` puts the
        entries into the memo it replaces), and one copied from another unpickler's leaves the
        count of entries at 0 (the next record's first object overwrites entry 0). So it first
        loads a primer that memoizes each value in order (persistent id, MEMOIZE, POP), read
        before ``file``."""
        unpickler = cls(_Primed(_primer(len(memo)), file), found)
        unpickler._priming = [memo[i] for i in range(len(memo))]
        unpickler.load()
        unpickler._priming = None
        return unpickler


def _primer(count: int) -> bytes:
    """A pickle that memoizes persistent ids 0..count-1, in order, and returns None."""
    return b"".join(b"J" + struct.pack("<i", i) + b"Q\x940" for i in range(count)) + b"N."


class _Primed:
    """The file an unpickler reads: ``primer``'s bytes, then ``file``'s (the unpickler reads
    exactly one opcode's bytes at a time outside frames, and the primer has none: no read
    straddles the two)."""

    def __init__(self, primer: bytes, file: Any):
        self._primer, self._file = io.BytesIO(primer), file
        self._left = len(primer)

    def _source(self) -> Any:
        return self._primer if self._left else self._file

    def read(self, size: int = -1) -> bytes:
        data = self._source().read(size)
        self._consumed(data)
        return data

    def readinto(self, buffer: Any) -> int:
        source = self._source()
        n = source.readinto(buffer)
        if source is self._primer:
            self._left -= n
        return n

    def readline(self, size: int = -1) -> bytes:
        data = self._source().readline(size)
        self._consumed(data)
        return data

    def _consumed(self, data: bytes) -> None:
        if self._left:
            self._left -= len(data)


class _Reached:
    """The furthest offset of the pickle read so far, told to ``progress`` as increments."""

    def __init__(self, progress: Callable[[int], None] | None):
        self.progress, self.offset = progress, 0

    def __call__(self, offset: int) -> None:
        if self.progress is not None and offset > self.offset:
            self.progress(offset - self.offset)
            self.offset = offset

    def stream(self, data: bytes | bytearray) -> io.BytesIO:
        return io.BytesIO(data) if self.progress is None else _ReportingStream(data, self)


class _ReportingStream(io.BytesIO):
    """The pickle as a file that reports its position after every read the unpickler makes."""

    def __init__(self, data: bytes | bytearray, reached: _Reached):
        super().__init__(data)
        self._reached = reached

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self._reached(self.tell())
        return data

    def readinto(self, buffer: Any) -> int:
        n = super().readinto(buffer)
        self._reached(self.tell())
        return n

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self._reached(self.tell())
        return line


def _memo_span(data: bytes | bytearray, ends: list[int], index: int) -> tuple[int, int]:
    """Memo indices created by record ``index``: [count before it, count after it)."""
    count, first, start = 0, 0, 0
    for i, end in enumerate(ends[: index + 1]):
        if i == index:
            first = count
        for opcode, _arg, _pos in pickletools.genops(io.BytesIO(data[start:end])):
            if opcode.name == "MEMOIZE":
                count += 1
        start = end
    return first, count
