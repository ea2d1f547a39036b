"""The ``attributes set on objects`` ``interpreter_state`` entry: attributes the cells set on
objects of library classes whose own pickling leaves them out, found at checkpoint, set again
at resume.

``df.name = "train"``, ``series.unit = "kg"``, ``index.tag = ...``, ``img.label = ...`` on a PIL
image: pandas' ``__getstate__`` keeps the data, ``attrs`` and flags, PIL's keeps the info, mode,
size and pixels, so after a resume the attribute was gone under an ``exact`` verdict (found by a
probe). Nothing in the object tells an attribute the session added from one the class leaves out
on purpose; the cells' text does (``cell_text``: ``a.b = ...``, ``a.b.c += 1``, in every cell of
the input history).

``capture()``: for each assigned chain, the owner is reached from the namespace through
instances' own ``__dict__`` only (no property or ``__getattr__`` runs); it is carried when it is
an instance (modules and classes are ``library_values``'), of a class that is not the
notebook's (its pickling is as its class says) nor the kernel's or this product's, whose class
pickles through a reduction of its own (``_own_reduction``: ``__reduce_ex__``, ``__reduce__`` or
``__getstate__`` defined below ``object``, or a ``copyreg`` reducer), and whose own ``__dict__``
holds the attribute now. ``(owner, attribute, value)`` is pickled after the variables in the
same graph, so the owner is the variable's object; a value that would not come back whole, or a
string that looks like a credential, is named instead. ``restore()`` (after the variables) puts
each value into the owner's ``__dict__``, as it was; an owner that came back a placeholder is
left alone (the variable is named already).

The ``process ids remembered`` entry: objects that remember the id of the process that made them
to tell a forked child from it (transformers' ``DataCollatorForLanguageModeling(seed=...)`` keeps
``_generator_pid`` and makes its generator again from the seed where ``os.getpid()`` differs:
after a resume its masking started over from the seed, under an exact verdict). A resumed kernel
is the session's process, not a child. ``_remembered_pids()`` finds each attribute whose name
holds ``pid`` and whose value is this kernel's id, in the own ``__dict__`` of a namespace value
or of an object one holds there (``trainer.data_collator``); ``_restore_pids`` gives each the
resumed kernel's id.
"""

from __future__ import annotations

import copyreg
import functools
import os
import types
from typing import Any

from . import cell_text
from .ipython_state import the_shell
from .library_patches import OWN, own_attributes
from .library_state import the_sessions
from .placeholders import Uncaptured

#: Top-level packages whose objects this entry leaves alone: the kernel's (``ipython_state``
#: carries the shell's settings) and this product's.
_NOT_HERE = frozenset({"IPython", "ipykernel", "traitlets", "comm", "jupyter_client"}) | OWN
_REDUCTIONS = ("__reduce_ex__", "__reduce__", "__getstate__")


def capture(namespace: dict[str, Any], sources: list[str]) -> dict[str, Any] | None:
    """``{"set": [(owner, attribute, value, label)], "lost": [label (why)]}`` for the attributes
    the cells ``sources`` set on objects (see the module docstring); None when none."""
    carried: list[tuple[Any, str, Any, str]] = []
    lost: list[str] = []
    seen: set[tuple[int, str]] = set()
    for source in sources:
        for chain, in_place in cell_text.facts(source).assigned:
            owner = _instance_at(namespace, chain[:-1])
            attribute = chain[-1]
            if in_place or owner is None or (id(owner), attribute) in seen:
                continue
            held = _own_dict(owner)
            if held is None or attribute not in held or not _own_reduction(type(owner)):
                continue
            seen.add((id(owner), attribute))
            value, label = held[attribute], ".".join(chain)
            if (why := cell_text.why_left_out(attribute, value)) is not None:
                lost.append(f"{label} ({why})")
            else:
                carried.append((owner, attribute, value, label))
    return {"set": carried, "lost": lost} if carried or lost else None


def _instance_at(namespace: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The object ``names`` leads to from ``namespace`` through instances' own ``__dict__``s, if
    it is an instance of a library class this entry looks at; else None."""
    owner = namespace.get(names[0])
    for name in names[1:]:
        held = _own_dict(owner)
        owner = held.get(name) if held is not None else None
    kind = type(owner)  # not owner.__class__: that may run code
    if owner is None or issubclass(kind, (types.ModuleType, type)) or the_sessions(kind):
        return None
    return None if kind.__module__.partition(".")[0] in _NOT_HERE else owner


def _own_dict(owner: Any) -> dict[str, Any] | None:
    """An instance's own ``__dict__`` (``library_patches.own_attributes``: no code of its class
    runs, a dead weak proxy gives none); None for a module or a class, whose attributes are
    ``library_values``'."""
    if issubclass(type(owner), (types.ModuleType, type)):
        return None  # type(), not isinstance: that reads __class__
    held = own_attributes(owner)
    return held if type(held) is dict else None


@functools.cache
def _own_reduction(kind: type) -> bool:
    """Whether ``kind`` pickles through a reduction of its own (or a ``copyreg`` reducer),
    which may leave attributes of the instance's ``__dict__`` out."""
    return kind in copyreg.dispatch_table or any(
        name in vars(base) for base in kind.__mro__ if base is not object for name in _REDUCTIONS)


def restore(state: dict[str, Any]) -> str | None:
    refused = list(state["lost"])
    for owner, attribute, value, label in state["set"]:
        if isinstance(owner, Uncaptured):
            continue
        try:
            object.__getattribute__(owner, "__dict__")[attribute] = value
        except (AttributeError, TypeError) as exc:  # the object came back without a __dict__
            refused.append(f"{label} ({type(exc).__name__}: {exc})")
    return ", ".join(refused) or None


def _remembered_pids() -> list[tuple[Any, str]] | None:
    shell = the_shell()
    if shell is None:
        return None
    pid, found, seen = os.getpid(), [], set()
    values = list(shell.user_ns.values())
    held = [inner for value in values if (own := _own_dict(value)) is not None
            for inner in list(own.values())]
    for owner in (*values, *held):
        own = _own_dict(owner)
        if own is None or id(owner) in seen or issubclass(type(owner), Uncaptured):
            continue
        seen.add(id(owner))
        found += [(owner, name) for name, value in list(own.items())
                  if type(value) is int and value == pid and "pid" in name.lower()]
    return found or None


def _restore_pids(remembered: list[tuple[Any, str]]) -> None:
    for owner, name in remembered:
        if not isinstance(owner, Uncaptured):
            object.__getattribute__(owner, "__dict__")[name] = os.getpid()


ENTRIES = (("attributes set on objects", cell_text.from_the_shell(capture), restore),
           ("process ids remembered", _remembered_pids, _restore_pids))
