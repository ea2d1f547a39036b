"""CPython's own change counters for classes and dicts: whether a class's or a dict's contents
may have changed since it was last looked at, without reading them.

CPython keeps, for its attribute caches, a version tag on every class (``tp_version_tag``) and,
through 3.13, on every dict (``ma_version_tag``, PEP 509). Python does not expose either; this
module reads them at their place in the object (ctypes), after checking that the place is right:

- ``class_version(cls)``: a number that is the same at two calls only if nothing was set on or
  deleted from ``cls`` or its bases in between (``type.__setattr__`` and ``__delattr__`` call
  ``PyType_Modified``, which zeroes the tag of the class and of its subclasses; the C API's
  documentation asks C code that changes a class's dict to call it too, or CPython's own
  attribute cache would serve stale values). A class without a tag gets one here by a lookup
  CPython caches (``type.__getattribute__(cls, "mro")``: runs no code of the class or its
  metaclass). 0: unknown, treat as changed (a class whose tag CPython no longer renews, past
  its limit of versions per class in 3.12+).
- ``dict_version(d)``: a number that changes with every change to ``d`` (each change takes the
  next value of one interpreter-wide counter); 0: unknown (3.14 removed the counter).

Tags are never handed out twice in 3.11+ (Objects/typeobject.c of python/cpython: clearing the
type cache leaves the counter as it is); 3.10 restarted the counter at ``sys._clear_type_cache()``,
so a changed class could get its old tag back: there ``class_version`` is always 0. Elsewhere than
CPython, or where a probe at first use does not see a counter behave as above (layout checked
against ``__basicsize__`` and ``__flags__``, then a class and a dict changed in hand), both
answer 0 and the callers read everything, as without this module.

Callers keep a strong reference to what they compare, so that an id is not reused while its
number is kept.
"""

from __future__ import annotations

import ctypes
import functools
import sys

_POINTER = ctypes.sizeof(ctypes.c_void_p)
#: ``PyObject_HEAD`` (``object.__basicsize__``: larger in a free-threaded build), ``ob_size``.
_TYPE_FIELDS = object.__basicsize__ + _POINTER
#: ``PyTypeObject``: 45 pointer-sized fields from ``tp_name`` to ``tp_del``, then the tag.
_TP_BASICSIZE = _TYPE_FIELDS + _POINTER
_TP_FLAGS = _TYPE_FIELDS + 18 * _POINTER
_TP_VERSION_TAG = _TYPE_FIELDS + 45 * _POINTER
#: ``PyDictObject``: ``PyObject_HEAD``, ``ma_used``, then the tag.
_MA_USED = object.__basicsize__
_MA_VERSION_TAG = _MA_USED + ctypes.sizeof(ctypes.c_ssize_t)
#: The process's memory as 32- and 64-bit words, indexed by address // 4 and // 8 (nothing is
#: read until an index is): a read costs a third of a ``from_address`` object's. None where
#: ctypes or memoryview refuse so long an array (then nothing is counted).
try:
    _WORDS32 = memoryview((ctypes.c_uint32 * (sys.maxsize >> 2)).from_address(0)).cast("B").cast("I")
    _WORDS64 = memoryview((ctypes.c_uint64 * (sys.maxsize >> 3)).from_address(0)).cast("B").cast("Q")
except (OverflowError, ValueError, TypeError, MemoryError):
    _WORDS32 = _WORDS64 = None


def class_version(cls: type) -> int:
    """``cls``'s version tag (assigned now if it has none), or 0: see the module docstring."""
    if not _classes_counted():
        return 0
    return _class_tag(cls) or _tag_now(cls)


def dict_version(mapping: object) -> int:
    """``mapping``'s version tag where it is an exact ``dict``, else 0 (also 0: see the module
    docstring)."""
    if type(mapping) is not dict or not _dicts_counted():
        return 0
    return _WORDS64[(id(mapping) + _MA_VERSION_TAG) >> 3]


def _class_tag(cls: type) -> int:
    return _WORDS32[(id(cls) + _TP_VERSION_TAG) >> 2]


def _tag_now(cls: type) -> int:
    type.__getattribute__(cls, "mro")  # a cached lookup in cls's MRO assigns the tag
    return _class_tag(cls)


@functools.cache
def _classes_counted() -> bool:
    """Whether class tags sit where ``_TP_VERSION_TAG`` reads and behave as documented."""
    if (sys.implementation.name != "cpython" or sys.version_info < (3, 11) or _WORDS32 is None
            or _TP_VERSION_TAG % 4 or object.__basicsize__ % 8):  # the words above: aligned
        return False
    try:
        for known in (type, object, int, dict, ctypes.Structure):
            if (ctypes.c_ssize_t.from_address(id(known) + _TP_BASICSIZE).value
                    != known.__basicsize__
                    or ctypes.c_ulong.from_address(id(known) + _TP_FLAGS).value != known.__flags__):
                return False
        base = type("_Base", (), {})
        derived = type("_Derived", (base,), {})
        first = _tag_now(derived)
        derived.changed = 1
        second = _tag_now(derived)
        base.changed = 1  # a base's change reaches its subclasses
        third = _tag_now(derived)
        return 0 not in (first, second, third) and len({first, second, third}) == 3
    except Exception:  # any surprise means "no counter here"
        return False


@functools.cache
def _dicts_counted() -> bool:
    """Whether dict tags sit where ``_MA_VERSION_TAG`` reads and change with each change."""
    if (sys.implementation.name != "cpython" or _WORDS64 is None or _MA_VERSION_TAG % 8
            or object.__basicsize__ % 8):
        return False
    try:
        one, other = {"a": 1}, {"a": 1}
        if ctypes.c_ssize_t.from_address(id(one) + _MA_USED).value != 1:
            return False
        seen = [_WORDS64[(id(d) + _MA_VERSION_TAG) >> 3] for d in (one, other)]
        for change in (lambda: one.__setitem__("a", 2), lambda: one.__setitem__("b", 1),
                       lambda: one.pop("b"), lambda: one.update(c=3)):
            change()
            seen.append(_WORDS64[(id(one) + _MA_VERSION_TAG) >> 3])
        return 0 not in seen and len(set(seen)) == len(seen)
    except Exception:  # any surprise means "no counter here"
        return False
