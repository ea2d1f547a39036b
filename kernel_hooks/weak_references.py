"""Weak references in the namespace: carried to what they refer to, and checked after the load.

``weakref.ref`` (and ``WeakMethod``), ``weakref.proxy`` and the weak containers
(``WeakValueDictionary``, ``WeakKeyDictionary``, ``WeakSet``) do not pickle (``TypeError: cannot
pickle 'weakref.ReferenceType' object``): the name holding one was not restored. A proxy did
pickle, silently, as a copy of its referent (it forwards ``__reduce_ex__``): no longer the same
object as the one it stood for; and a ``weakref.finalize`` as a dead one, whose function never
ran. Each comes back alive, on the same referent.

Call order: the graph pickler asks ``reduce(obj)`` for every object (``graph``). A reference
pickles as its referent (pickle's memo makes it the very object the rest of the graph holds) and
its callback; a container as its live items and its own attributes. While the graph loads, the
unpickler's memo holds every referent, and each rebuilt weak object is registered with the
current ``rebuild.Loading`` (``Loading.weak``). After the load, ``lost_referents`` collects once
and names each weak object whose referent is gone: nothing else came back holding it (on the old
pod something outside the namespace did: IPython's output history, a library module, a thread).
The restore names it for every name that reaches it, so the verdict is not ``exact``. A dead
reference comes back dead.

CPython only: a proxy's referent and callback are read from its ``PyWeakReference`` fields
(``wr_object``, ``wr_callback``, right after the object header), which Python does not expose.
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from typing import Any

from . import rebuild
from .placeholders import type_name

#: The attributes a weak container's ``__init__`` makes; every other one is the user's.
_INTERNALS = frozenset({"data", "_remove", "_pending_removals", "_iterating", "_dirty_len"})
_CONTAINERS = (weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet)
_REFERENCES = (weakref.ref, weakref.WeakMethod, weakref.finalize)
#: A proxy forwards every lookup, ``isinstance`` too, to its referent: a dead one raises
#: ReferenceError wherever it is looked at.
PROXIES = (weakref.ProxyType, weakref.CallableProxyType)
_POINTER = ctypes.sizeof(ctypes.c_void_p)


def is_weak(obj: object) -> bool:
    """Whether ``reduce`` carries ``obj``: a type check only, safe on a dead proxy."""
    kind = type(obj)
    return kind in _REFERENCES or kind in PROXIES or isinstance(obj, _CONTAINERS)


def is_a(obj: object, kinds: type | tuple[type, ...]) -> bool:
    """``isinstance`` for a value that may be a dead proxy (which raises there): never one."""
    return type(obj) not in PROXIES and isinstance(obj, kinds)


def reduce(obj: object) -> tuple | None:
    """The reduce tuple of a weak reference or weak container; ``None`` for anything else."""
    kind = type(obj)
    if kind is weakref.ref:
        target = obj()
        return (dead, ("ref",)) if target is None else (reference, (target, obj.__callback__))
    if kind is weakref.WeakMethod:
        method = obj()
        return (dead, ("method",)) if method is None else (weak_method, (method, _user_callback(obj)))
    if kind in PROXIES:
        target, callback = _proxy_fields(obj)
        return (dead, ("proxy",)) if target is None else (proxy, (target, callback))
    if kind is weakref.finalize:
        info = obj.peek()  # (referent, func, args, kwargs) while alive
        return (dead_finalizer, ()) if info is None else (finalizer, (*info, obj.atexit))
    if isinstance(obj, _CONTAINERS):
        items = list(obj) if isinstance(obj, weakref.WeakSet) else list(obj.items())
        own = {k: v for k, v in vars(obj).items() if k not in _INTERNALS}
        return container, (kind, items), own or None
    return None


def _user_callback(method_reference: weakref.WeakMethod) -> Any:
    """The callback given to ``WeakMethod(meth, callback)``: the ``callback`` its ``__callback__``
    closes over (weakref.py ``WeakMethod.__new__``)."""
    wrapper = method_reference.__callback__
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=True))
    return cells["callback"].cell_contents if "callback" in cells else None


def _proxy_fields(weak_proxy: Any) -> tuple[Any, Any]:
    """A proxy's referent (``None`` when dead) and callback."""
    fields = id(weak_proxy) + object.__basicsize__
    target = ctypes.c_void_p.from_address(fields).value
    callback = ctypes.c_void_p.from_address(fields + _POINTER).value
    if target is None or target == id(None):
        return None, None
    referent = ctypes.cast(target, ctypes.py_object).value
    if weak_proxy.__class__ is not type(referent):  # the proxy forwards __class__ to its referent
        raise TypeError("cannot read the referent of this weakref.proxy")
    return referent, None if callback is None else ctypes.cast(callback, ctypes.py_object).value


def dead(kind: str) -> Any:
    """A reference of ``kind`` ("ref", "method", "proxy") whose referent is gone, as it was at
    the checkpoint: made on an object that dies when this returns."""
    gone = _Gone()
    if kind == "method":
        return weakref.WeakMethod(gone.method)
    return weakref.proxy(gone) if kind == "proxy" else weakref.ref(gone)


class _Gone:
    """The referent of a dead reference."""

    def method(self) -> None:
        """What a dead ``WeakMethod`` referred to."""


def reference(target: Any, callback: Any) -> weakref.ref:
    made = weakref.ref(target, callback)
    _register(made, [target])
    return made


def weak_method(method: Any, callback: Any) -> weakref.WeakMethod:
    made = weakref.WeakMethod(method, callback)
    _register(made, [method.__self__])
    return made


def proxy(target: Any, callback: Any) -> Any:
    made = weakref.proxy(target, callback)
    _register(made, [target])
    return made


def finalizer(target: Any, func: Any, args: tuple, kwargs: dict | None,
              atexit: bool) -> weakref.finalize:
    """A ``weakref.finalize`` again: it pickled as an empty one, dead (its registration lives in
    the class's ``_registry``), so its function never ran."""
    made = weakref.finalize(target, func, *args, **(kwargs or {}))
    made.atexit = atexit
    _register(made, [target])
    return made


def dead_finalizer() -> weakref.finalize:
    """A finalizer that already ran or was detached, as it was at the checkpoint."""
    return weakref.finalize.__new__(weakref.finalize)


def container(kind: type, items: list) -> Any:
    """A weak container of class ``kind`` holding ``items`` (values, or key-value pairs), set up
    by its weakref base class's ``__init__`` and filled through the base's methods: a subclass's
    own ``__init__`` and ``__setitem__`` ran when the session built it; pickle then sets the
    subclass's own attributes."""
    base = next(b for b in _CONTAINERS if issubclass(kind, b))
    made = kind.__new__(kind)
    base.__init__(made)
    if base is weakref.WeakSet:
        for item in items:
            base.add(made, item)
        _register(made, items)
    else:
        for key, value in items:
            base.__setitem__(made, key, value)
        weak_side = 0 if base is weakref.WeakKeyDictionary else 1
        _register(made, [pair[weak_side] for pair in items])
    return made


def _register(made: object, referents: list) -> None:
    loading = rebuild.current_loading()
    if loading is not None:
        loading.weak.append((made, [(weakref.ref(r), type_name(r)) for r in referents]))


def lost_referents(rebuilt: list[tuple[object, list[tuple[weakref.ref, str]]]]) -> dict[int, str]:
    """After the load (the unpickler's memo released): for each rebuilt weak object (by id) whose
    referents are gone, what it lost. Collects once when there is anything to check, so a
    referent kept only by a reference cycle of garbage counts as gone."""
    if not rebuilt:
        return {}
    gc.collect()
    lost: dict[int, str] = {}
    for made, referents in rebuilt:
        gone = [name for ref, name in referents if ref() is None]
        if not gone:
            continue
        what = type_name(made)
        if not isinstance(made, _CONTAINERS):
            lost[id(made)] = (f"its {what} to a {gone[0]} came back dead: nothing else held the "
                              f"{gone[0]} after the resume")
        else:
            lost[id(made)] = (f"its {what} lost {len(gone)} of its {len(referents)} entries "
                              f"({', '.join(sorted(set(gone)))}): nothing else held them after "
                              "the resume")
    return lost
