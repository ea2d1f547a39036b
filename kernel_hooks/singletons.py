"""Process singletons of libraries, carried as the singleton they are (issue 28 item 8).

accelerate keeps the state of the process in three "Borg" classes (accelerate/state.py):
``PartialState``, ``AcceleratorState`` and ``GradientState`` each set ``self.__dict__ =
self._shared_state``, a dict shared by every instance of the class in the process. Pickled as
plain objects, each would come back with a private copy of that dict while the resumed
process's ``_shared_state`` stays empty: ``AcceleratorState()`` (which accelerate and
transformers call everywhere) would then build a second, different state beside the one the
restored ``Accelerator`` holds. And ``GradientState`` holds weak references to the active
DataLoaders (``_dataloader_references_ref``), which do not pickle at all: every ``Accelerator``,
its optimizer, scheduler and DataLoaders were lost.

Here an instance of any of them reduces to ``shared(cls)`` (an instance whose ``__dict__`` IS the
class's ``_shared_state`` here) with, as its state, the shared dicts of all three classes (weak
references as their referents). ``shared_state`` fills, in place, each class's shared dict that was
empty when the restore began (``restoring``: nothing here had initialized accelerate; what
accelerate's own constructors set while the graph loads is replaced), weak references made
again; one that was not (the resumed kernel built its own ``Accelerator`` first) is kept as it
is: every instance stays the one state of the process.

The kernel's own singletons (``KernelSingletons``): the IPython shell (``ip = get_ipython()``, or a
helper object that keeps it), ipykernel's kernel (``shell.kernel``), the asyncio loop the
kernel runs cells on (``asyncio.get_event_loop()``) and its output streams (ipykernel's
``OutStream``: ``contextlib.redirect_stdout`` left open keeps the one it replaced, and its exit
after a resume put a placeholder in ``sys.stdout``: the kernel answered no request again). None
of them pickled: the names holding them were not restored. Each reduces to
``kernel_singleton(role)``: the resumed kernel's own. So does
the namespace's own dict held in a variable (``g = globals()``: ``capture`` puts ``TheNamespace``
in its place), which pickled as a copy that no longer saw the namespace; held inside another
object it still does (pickle asks ``reducer_override`` about no dict).

The process's global random generators (``GlobalGenerators``): Python's (``random._inst``,
whose bound methods ``from random import randint`` takes), NumPy's legacy one
(``numpy.random.mtrand._rand``: ``from numpy.random import rand``) and torch's
(``torch.default_generator``). Pickled as objects, each came back a copy: ``randint`` drew from
a stream of its own that ``random.seed`` no longer reached, under an ``exact`` verdict (found by a
probe). Each reduces to ``rebuild.library_object(module, attribute)``: the resumed process's, whose
state the session state gives back (``session_state.restore``).

Call order: the graph pickler (``graph``) asks ``KernelSingletons.reduce(obj)`` before the live
objects (a stream is one) and the callbacks (the shell is a traitlets object), and
``AccelerateStates.reduce(obj)`` and ``GlobalGenerators.reduce(obj)`` after ``torch_reduce``;
the restore reads the graph inside ``restoring()``. Nothing is imported (the classes and generators come from
``sys.modules``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The Borg classes of accelerate/state.py, in the order their states are filled at resume
#: (``AcceleratorState.__init__`` copies ``PartialState``'s in).
CLASSES = ("PartialState", "AcceleratorState", "GradientState")
_WEAK = "_dataloader_references_ref"  # GradientState: weak references to the active DataLoaders


class AccelerateStates:
    """Reductions for one graph (the classes are looked up once, from ``sys.modules``)."""

    def __init__(self) -> None:
        state = sys.modules.get("accelerate.state")
        self._classes = tuple(getattr(state, name) for name in CLASSES
                              if state is not None and hasattr(state, name))
        self._to_fp32 = getattr(sys.modules.get("accelerate.utils.operations"),
                                "ConvertOutputsToFp32", None)

    def reduce(self, obj: object) -> tuple | None:
        """``shared(cls)`` with every class's shared state, for an instance of one of them; the
        forward of a model prepared for mixed precision made again around the forward it wraps
        (accelerate/utils/operations.py: ``ConvertOutputsToFp32.__getstate__`` refuses, so a
        model ``Accelerator(mixed_precision="bf16").prepare`` made, and a ``Trainer`` with
        ``bf16=True``, were not restored)."""
        if self._to_fp32 is not None and type(obj) is self._to_fp32:
            return self._to_fp32, (obj.model_forward,)
        if not self._classes or type(obj) not in self._classes:
            return None
        states = {cls.__name__: _strong(dict(cls._shared_state)) for cls in self._classes}
        return (shared, (type(obj),), states, None, None, shared_state)


def _strong(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with GradientState's weak references as their referents (dead ones dropped;
    ``None``, its "no DataLoader" entry, kept)."""
    if isinstance(state.get(_WEAK), list):
        live = [r if r is None else r() for r in state[_WEAK]]
        state[_WEAK] = [r for r, was in zip(live, state[_WEAK], strict=True)
                        if r is not None or was is None]
    return state


def shared(cls: type) -> Any:
    """An instance of ``cls`` that shares the process's state of that class (as its
    ``__init__`` does, without initializing anything)."""
    instance = cls.__new__(cls)
    instance.__dict__ = cls._shared_state
    return instance


@contextmanager
def restoring() -> Iterator[None]:
    """Around the unpickling of a graph: the classes whose shared state is empty now are the
    snapshot's to fill. accelerate's constructors that run while the graph loads
    (``DataLoaderShard.__reduce__`` calls the class, whose ``__init__`` calls ``GradientState()``)
    initialize them with defaults first; the captured state replaces those, in place."""
    global _empty
    state = sys.modules.get("accelerate.state")
    _empty = {name for name in CLASSES
              if state is None or not getattr(getattr(state, name, None), "_shared_state", None)}
    try:
        yield
    finally:
        _empty = None


_empty: set[str] | None = None  # inside ``restoring``: the classes empty when it began


def shared_state(instance: Any, states: dict[str, dict[str, Any]]) -> None:
    """Give each class that was empty when the restore began (``restoring``; outside it, each
    that is empty now) its captured state, in place: every instance sees it."""
    module = sys.modules[type(instance).__module__]
    for name in CLASSES:
        cls, state = getattr(module, name, None), states.get(name)
        fill = (name in _empty) if _empty is not None else not getattr(cls, "_shared_state", True)
        if cls is None or state is None or not fill:
            continue
        state = dict(state)
        if isinstance(state.get(_WEAK), list):
            state[_WEAK] = [r if r is None else weakref.ref(r) for r in state[_WEAK]]
        if cls._shared_state != state:
            cls._shared_state.clear()
            cls._shared_state.update(state)


class KernelSingletons:
    """The kernel's singletons by ``id`` for one graph, found once (none outside IPython)."""

    def __init__(self) -> None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        self._roles: dict[int, str] = {}
        self._stream = None
        if shell is None:
            return
        kernel = getattr(shell, "kernel", None)
        for role, obj in (("shell", shell), ("kernel", kernel), ("loop", _kernel_loop(kernel))):
            if obj is not None:
                self._roles[id(obj)] = role

        self._stream = getattr(sys.modules.get("ipykernel.iostream"), "OutStream", None)

    def reduce(self, obj: object) -> tuple | None:
        role = self._roles.get(id(obj))
        if role is None and self._stream is not None and isinstance(obj, self._stream):
            role = _STREAMS.get(getattr(obj, "name", None))
        return None if role is None else (kernel_singleton, (role,))


#: The kernel's output streams (``ipykernel.iostream.OutStream``) by name, as roles.
_STREAMS = {"stdout": "stdout", "stderr": "stderr"}


def _kernel_loop(kernel: Any) -> Any:
    """The asyncio loop under ipykernel's tornado ``io_loop`` (it runs the cells)."""
    return getattr(getattr(kernel, "io_loop", None), "asyncio_loop", None)


#: The process's global random generators: (module, attribute) of each.
GLOBAL_GENERATORS = (("random", "_inst"), ("numpy.random.mtrand", "_rand"),
                     ("torch", "default_generator"))


class GlobalGenerators:
    """The global random generators loaded now, by ``id``, for one graph."""

    def __init__(self) -> None:
        self._places = {id(found): place for place in GLOBAL_GENERATORS
                        if (found := getattr(sys.modules.get(place[0]), place[1], None))
                        is not None}

    def reduce(self, obj: object) -> tuple | None:
        from . import rebuild

        place = self._places.get(id(obj))
        return None if place is None else (rebuild.library_object, place)


class TheNamespace:
    """Stands for the user namespace in a variable of its own (``g = globals()``)."""

    def __reduce__(self) -> tuple:
        return (kernel_singleton, ("namespace",))


def kernel_singleton(role: str) -> Any:
    """This kernel's object of ``role`` (``KernelSingletons``, ``TheNamespace``): the namespace is
    the one being restored into."""
    from IPython import get_ipython

    from . import rebuild

    shell = get_ipython()
    if role == "shell":
        return shell
    if role == "namespace":
        loading = rebuild.current_loading()
        return loading.namespace if loading is not None else shell.user_ns
    if role == "kernel":
        return shell.kernel
    if role in _STREAMS:  # the kernel's own stream, wherever the session had redirected it
        return _kernel_stream(role)
    return _kernel_loop(shell.kernel)


def _kernel_stream(name: str) -> Any:
    """The resumed kernel's ``OutStream`` called ``name``: ``sys.stdout`` or ``sys.stderr``
    as the kernel made them (a resume runs before any cell could redirect them)."""
    return getattr(sys, name)

