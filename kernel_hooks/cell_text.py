"""What the cells' text says about the names they bind and the attributes they set, read once per
cell: ``facts(source)`` parses a cell (``ast``) the first time it is asked for and keeps what the
readers of the text need, by the cell's source.

- ``assigned``: the attribute chains the cell assigns to (``a.b = ...``, ``a.b.c += 1``,
  annotated ones, each part of an unpacking) as ``(("a", "b"), False)``, and the chains whose
  container it changes in place (``c.d[k] = v``, ``del c.d[k]``, ``c.d.append(v)``) as
  ``(("c", "d"), True)``, in the bodies of the functions it defines too
  (``library_values``, ``object_attributes``);
- ``takings``: ``(name, module, attribute, through_name)`` for each ``from module import
  attribute as name`` (``through_name`` False) and ``name = module.attribute`` (``module`` is
  the name bound to it, True) (``library_objects``).

A cell that does not parse (IPython syntax the input transformer left, a typo) says nothing.
``from_the_shell(capture)`` makes an entry's capture of a ``capture(namespace, sources)`` over the
shell's namespace and input history; ``why_left_out(attribute, value)`` is why a value the text
names does not travel.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .ipython_state import the_shell

Chain = tuple[str, ...]
Taking = tuple[str, str, str, bool]


@dataclass(frozen=True)
class CellFacts:
    assigned: list[tuple[Chain, bool]]
    takings: list[Taking]


_NOTHING = CellFacts([], [])
_facts: dict[str, CellFacts] = {}  # cell source -> what it says
#: The methods that change a ``dict``, ``list`` or ``set`` in place.
_MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "update",
                       "setdefault", "add", "discard", "popitem", "sort", "reverse"})


def facts(source: str) -> CellFacts:
    """What ``source`` assigns and takes (see the module docstring)."""
    if source not in _facts:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            tree = None
        _facts[source] = _NOTHING if tree is None else _read(tree)
    return _facts[source]


def _read(tree: ast.AST) -> CellFacts:
    assigned, takings = [], []
    for node in ast.walk(tree):
        for target, in_place in [*((t, False) for t in _targets(node)), *_changed_in_place(node)]:
            if (chain := _chain(target)) is not None:
                assigned.append((chain, in_place))
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            takings += [(alias.asname or alias.name, node.module, alias.name, False)
                        for alias in node.names if alias.name != "*"]
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Attribute)
              and isinstance(node.value.value, ast.Name)):
            takings.append((node.targets[0].id, node.value.value.id, node.value.attr, True))
    return CellFacts(assigned, takings)


def _changed_in_place(node: ast.AST) -> list[tuple[ast.expr, bool]]:
    """The container expressions ``node`` changes in place: ``c[k] = v``, ``c[k] += v``,
    ``del c[k]``, ``c.append(v)`` (``_MUTATORS``) give ``c``."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        return [(target.value, True) for target in targets if isinstance(target, ast.Subscript)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS):
        return [(node.func.value, True)]
    return []


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        found = [node.target]
    else:
        return []
    flat = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            flat.append(target)
    return flat


def _chain(target: ast.expr) -> Chain | None:
    """``a.b.c`` as ``("a", "b", "c")``; None for anything else (a subscript, a call)."""
    names = []
    while isinstance(target, ast.Attribute):
        names.append(target.attr)
        target = target.value
    if not names or not isinstance(target, ast.Name):
        return None
    return (target.id, *reversed(names))


def from_the_shell(capture: Callable[[dict[str, Any], list[str]], Any]) -> Callable[[], Any]:
    """An ``interpreter_state`` capture: ``capture`` of the shell's namespace and the cells of
    its input history; None without a shell."""
    def capture_from_the_shell() -> Any:
        shell = the_shell()
        if shell is None:
            return None
        return capture(shell.user_ns, shell.history_manager.input_hist_parsed)

    return capture_from_the_shell


def why_left_out(attribute: str, value: Any) -> str | None:
    """Why the ``value`` the cells set on ``attribute`` is named, not saved: a string that looks
    like a credential (as environment variables, ``jupyter_gkeresume.credentials``), or a value
    that would not come back whole; None when it travels."""
    from jupyter_gkeresume import credentials

    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    if isinstance(value, str) and credentials.env_looks_secret(attribute, value):
        return "looks like a credential: not saved"
    return why_not_whole(value)
