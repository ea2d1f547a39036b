"""Notebook replay: which cells of the input history rebuild the variables a restore missed.

``plan_replay(history, missing)`` is pure (nothing runs): ``history`` is the kernel's input
history as IPython keeps it (index = execution count, index 0 empty), raw (``%magic`` lines, as
``Manifest.history`` holds them: IPython's transformer turns them into Python first) or already
transformed; ``missing`` the names that did not come back. It returns the execution counts to
re-run, in order: for each name, the last cell before the point of need that binds it, the cells
after that one that change the same object in place (``df["c"] = ...``, ``model.fit(x)``,
``items.append(...)``), and, transitively, what those cells read before binding it themselves.
Functions and classes defined by a chosen cell also pull in what their bodies read, as bound where
they are used (for a missing function: at the end of the history). A binding inside a branch or a
loop may not have run, so the binding before it is chosen too.

Limits, by design of a static analysis (say them to the user with the plan): mutation through a
function call (``train(model)``), ``exec``/``globals()``, and ``from m import *`` are not seen;
a cell that does not parse is never chosen and is listed in ``unparsed``. Cells that run the
snapshot magics (``%pause``, ``%resume``, ``%checkpoint``) are never chosen.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

SNAPSHOT_MAGICS = frozenset({"pause", "resume", "checkpoint", "snapshots"})
#: cell magics whose body runs as Python in the user namespace (bindings persist)
PYTHON_CELL_MAGICS = frozenset({"time", "capture"})
IPYTHON_NAMES = frozenset({"get_ipython", "In", "Out", "exit", "quit", "display"})
IPYTHON_CACHE_RE = re.compile(r"\A_(_{0,2}|i{1,3}|\d+|i\d+|ih|oh|dh)\Z")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class ReplayPlan:
    """``cells``: execution counts to re-run, ascending, with their ``sources``. ``unresolved``:
    names no cell binds (with why). ``rebinds``: every name the chosen cells bind besides the
    missing ones (re-running overwrites them: warn, or restore them again afterwards)."""

    cells: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    rebinds: list[str] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"cells": self.cells, "sources": self.sources, "unresolved": self.unresolved,
                "rebinds": self.rebinds, "unparsed": self.unparsed}


@dataclass(frozen=True)
class CellFacts:
    """What one cell does to the module namespace."""

    binds: frozenset[str]
    binds_always: frozenset[str]  # bound whenever the cell runs to its end (not in a branch/loop)
    mutates: frozenset[str]
    needs: frozenset[str]  # read before the cell binds them, while it runs
    needs_later: frozenset[str]  # read by functions and lambdas it defines, when they are called


def plan_replay(history: Sequence[str], missing: Iterable[str]) -> ReplayPlan:
    """The cells to re-run, in order, to rebind ``missing`` (see the module docstring)."""
    facts: dict[int, CellFacts | None] = {}
    for count, source in enumerate(history):
        if source and source.strip():
            facts[count] = analyze_cell(source)
    plan = ReplayPlan(unparsed=[c for c, f in facts.items() if f is None])
    wanted = sorted(set(missing))
    end = len(history)
    queue = deque((name, end) for name in wanted)
    seen: set[tuple[str, int]] = set()
    chosen: set[int] = set()
    while queue:
        name, before = queue.popleft()
        if (name, before) in seen or _predefined(name):
            continue
        seen.add((name, before))
        binders = [c for c, f in facts.items() if c < before and f and name in f.binds]
        if not binders:
            plan.unresolved.setdefault(name, _why_unresolved(name, before, facts, plan.unparsed))
            continue
        cells = []
        for cell in reversed(binders):  # a binding that may not have run keeps the one before
            cells.append(cell)
            if name in facts[cell].binds_always:
                break
        cells += [c for c, f in facts.items() if cells[-1] < c < before and f and name in f.mutates]
        for cell in cells:
            if cell not in chosen:
                chosen.add(cell)
                queue.extend((n, cell) for n in sorted(facts[cell].needs))
            # functions it defines run where ``name`` is used: what they read is needed there
            queue.extend((n, before) for n in sorted(facts[cell].needs_later))
    plan.cells = sorted(chosen)
    plan.sources = [history[c] for c in plan.cells]
    bound = set().union(*(facts[c].binds for c in plan.cells)) if plan.cells else set()
    plan.rebinds = sorted(bound - set(wanted))
    return plan


def analyze_cell(source: str) -> CellFacts | None:
    """What ``source`` binds, mutates and needs at module level; None if it does not parse.
    A cell that runs a snapshot magic binds nothing (so it is never chosen)."""
    try:
        tree = ast.parse(_as_python(source))
    except (SyntaxError, ValueError, RecursionError):
        return None
    scan = _ModuleScan()
    try:
        for stmt in tree.body:
            scan.statement(stmt)
    except RecursionError:
        return None
    if scan.snapshot_magic:
        return CellFacts(frozenset(), frozenset(), frozenset(), frozenset(), frozenset())
    return CellFacts(frozenset(scan.bound), frozenset(scan.always), frozenset(scan.mutated),
                     frozenset(scan.needs), frozenset(scan.later))


def _as_python(source: str) -> str:
    """IPython syntax (``%magic``, ``!cmd``, ``x?``) as the Python IPython runs; plain Python
    and anything IPython cannot transform come back unchanged."""
    try:
        ast.parse(source)
        return source
    except (SyntaxError, ValueError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    try:
        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError, IndexError, TypeError):
        return source


def _predefined(name: str) -> bool:
    return hasattr(builtins, name) or name in IPYTHON_NAMES or bool(IPYTHON_CACHE_RE.match(name))


def _why_unresolved(name: str, before: int, facts: dict, unparsed: list[int]) -> str:
    later = [c for c, f in facts.items() if c >= before and f and name in f.binds]
    if later:
        return f"first bound in cell {later[0]}, after the cell that needs it"
    if unparsed:
        return f"not bound by any cell that parses (unparsed: {unparsed})"
    return "not bound by any cell in the input history"


class _ModuleScan:
    """Walks one cell's top-level statements in execution order."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.always: set[str] = set()
        self.branch_depth = 0
        self.mutated: set[str] = set()
        self.needs: set[str] = set()
        self.later: set[str] = set()
        self.snapshot_magic = False

    def load(self, node: ast.AST | None) -> None:
        """Every name ``node`` reads now; nested scopes read theirs now or later."""
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in self.bound:
                self.needs.add(node.id)
            return
        if isinstance(node, ast.Lambda):
            self.load_all(_evaluated_on_definition(node))
            self.later |= _free_names(node)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self.load_all(_evaluated_on_definition(node))
            self.needs |= _free_names(node) - self.bound
            return
        if isinstance(node, ast.NamedExpr):
            self.load(node.value)
            self.bind(node.target)
            return
        if isinstance(node, ast.Call):
            self._check_magic(node)
        for child in ast.iter_child_nodes(node):
            self.load(child)

    def load_all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            self.load(node)

    def bind_name(self, name: str) -> None:
        self.bound.add(name)
        if not self.branch_depth:
            self.always.add(name)

    def bind(self, target: ast.AST) -> None:
        """An assignment target: names are bound, attributes/items mutate their root name."""
        if isinstance(target, ast.Name):
            self.bind_name(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element)
        elif isinstance(target, ast.Starred):
            self.bind(target.value)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            self.load(target)
            root = _root_name(target)
            if root:
                self.mutated.add(root)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._definition(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    self.bind_name(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Assign):
            self.load(node.value)
            for target in node.targets:
                self.bind(target)
        elif isinstance(node, ast.AnnAssign):
            self.load(node.value)
            if node.value is not None or not isinstance(node.target, ast.Name):
                self.bind(node.target)
        elif isinstance(node, ast.AugAssign):
            self.load(node.value)
            self.load(ast.Name(node.target.id, ast.Load()) if isinstance(node.target, ast.Name)
                      else node.target)
            self.bind(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.load(node.iter)
            self.bind(node.target)
            self._block(node.body + node.orelse, branch=True)
        elif isinstance(node, (ast.While, ast.If)):
            self.load(node.test)
            self._block(node.body + node.orelse, branch=True)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.load(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars)
            self._block(node.body)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self._block(node.body + node.orelse, branch=True)
            for handler in node.handlers:
                self.load(handler.type)
                self.branch_depth += 1
                if handler.name:
                    self.bind_name(handler.name)
                self.branch_depth -= 1
                self._block(handler.body, branch=True)
            self._block(node.finalbody)
        elif isinstance(node, ast.Match):
            self.load(node.subject)
            self.branch_depth += 1
            for case in node.cases:
                self._pattern(case.pattern)
                self.load(case.guard)
                self._block(case.body)
            self.branch_depth -= 1
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if not isinstance(target, ast.Name):
                    self.bind(target)
        elif isinstance(node, ast.Expr) and _python_cell_magic(node.value) is not None:
            self._block(_python_cell_magic(node.value))
        elif isinstance(node, ast.Expr):
            self.load(node.value)
            call = node.value.value if isinstance(node.value, ast.Await) else node.value
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
                root = _root_name(call.func.value)
                if root:
                    self.mutated.add(root)
        elif not isinstance(node, (ast.Global, ast.Nonlocal)):
            self.load(node)

    def _block(self, body: list[ast.stmt], *, branch: bool = False) -> None:
        """Statements in order; in a ``branch`` (loop, if, except, ...) they may not run."""
        self.branch_depth += branch
        for stmt in body:
            self.statement(stmt)
        self.branch_depth -= branch

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.load_all(_evaluated_on_definition(node))
        if isinstance(node, ast.ClassDef):  # the body runs now, its methods later
            self.needs |= _free_names(node, functions=False) - self.bound
            self.later |= _method_free_names(node)
        else:
            self.later |= _free_names(node)
        self.bind_name(node.name)

    def _pattern(self, pattern: ast.pattern) -> None:
        for child in ast.walk(pattern):
            if isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
                self.bind_name(child.name)
            elif isinstance(child, ast.MatchMapping) and child.rest:
                self.bind_name(child.rest)
            elif isinstance(child, ast.MatchValue):
                self.load(child.value)
            elif isinstance(child, ast.MatchClass):
                self.load(child.cls)

    def _check_magic(self, call: ast.Call) -> None:
        func = call.func
        if (isinstance(func, ast.Attribute) and func.attr in ("run_line_magic", "run_cell_magic")
                and call.args and isinstance(call.args[0], ast.Constant)
                and call.args[0].value in SNAPSHOT_MAGICS):
            self.snapshot_magic = True


def _python_cell_magic(node: ast.AST) -> list[ast.stmt] | None:
    """The body of ``get_ipython().run_cell_magic('time', line, body)`` as statements."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run_cell_magic" and len(node.args) == 3
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
            and node.args[0].value in PYTHON_CELL_MAGICS):
        return None
    try:
        return ast.parse(_as_python(node.args[2].value)).body
    except (SyntaxError, ValueError):
        return None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _free_names(scope: ast.AST, *, functions: bool = True) -> set[str]:
    """Names a function, lambda, comprehension or class body reads from outside itself;
    ``functions=False`` leaves out what nested functions read (they run later, if ever)."""
    local: set[str] = set()
    declared_global: set[str] = set()
    loads: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
            if arg is not None:
                local.add(arg.arg)
        body = scope.body if isinstance(scope.body, list) else [scope.body]
    elif isinstance(scope, ast.ClassDef):
        body = scope.body
    else:  # comprehension: the first iterable belongs to the enclosing scope
        gens = scope.generators
        body = [*(g.target for g in gens), *(g.iter for g in gens[1:]),
                *(c for g in gens for c in g.ifs)]
        body += [scope.key, scope.value] if isinstance(scope, ast.DictComp) else [scope.elt]
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            stack.extend(_evaluated_on_definition(node))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                local.add(node.name)
            if functions or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                  ast.Lambda)):
                loads |= _free_names(node)
            continue
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else local).add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared_global.update(node.names)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            loads.add(node.target.id)
        elif isinstance(node, ast.alias):
            local.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            local.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            local.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return loads - (local - declared_global)


def _evaluated_on_definition(node: ast.AST) -> list[ast.AST]:
    """The parts of a nested scope that run in the enclosing one, where it is defined."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *filter(None, node.args.kw_defaults)]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    return [node.generators[0].iter]


def _method_free_names(node: ast.ClassDef) -> set[str]:
    """What the functions defined in a class body read from outside, when they are called."""
    out: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out |= _free_names(stmt)
    return out
