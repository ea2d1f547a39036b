"""The magics: %checkpoint, %snapshots, %resume, %pause.

Each option is declared once, with IPython's ``magic_arguments``; the help it generates from the
docstring and those declarations is what ``%magic --help`` prints and ``%magic?`` shows.

User mistakes raise ``UsageError`` (IPython shows the message, no traceback); domain failures are
printed as one clear line, never as a traceback from deep inside.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, real_name

from jupyter_gkeresume.errors import GkeResumeError, InvalidInputError, SnapshotNotFoundError
from jupyter_gkeresume.printable import printable
from jupyter_gkeresume.units import human_bytes

from .notebooks import notebook_path, shorten, this_notebook

if TYPE_CHECKING:
    from .replay import ReplayPlan
    from .results import CheckpointResult, ResumeResult


class MagicFailed(GkeResumeError):
    """A domain failure shown as one line (IPython calls ``_render_traceback_``)."""

    def __init__(self, cause: GkeResumeError):
        super().__init__(str(cause))
        self.cause = cause

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self.cause).__name__}: {printable(self.cause)}"]


def _parse(magic: Callable, line: str) -> argparse.Namespace | None:
    """``line`` parsed by the magic's ``magic_arguments`` declaration; None when ``-h``/``--help``
    printed the help (generated from that declaration). Mistakes are ``UsageError``s naming the
    magic."""
    name = real_name(magic)
    try:
        args = shlex.split(line)  # as a shell would: quotes are removed
        if {"-h", "--help"} & set(args):
            print(magic.__doc__)
            return None
        return magic.parser.parse_args(args)
    except (UsageError, ValueError) as exc:  # ValueError: unbalanced quotes
        raise UsageError(f"%{name}: {exc}") from None


def format_checkpoint(r: CheckpointResult) -> str:
    """The report of a checkpoint, one line per fact; stored text escaped (``printable``)."""
    p = printable
    lines = [
        f"checkpoint {r.snapshot_id}" + (f" ({p(r.name)})" if r.name else "")
        + f": {len(r.saved)} objects, {human_bytes(r.bytes_total)} "
        f"({human_bytes(r.bytes_new)} new, {human_bytes(r.bytes_reused)} reused) in {r.seconds:.2f} s",
    ]
    for s in r.skipped:  # a part of a saved object is said under that object's name
        lines.append(f"  {p(s.name)} comes back without its {p(s.type)}: {p(s.reason)}" if s.inside
                     else f"  not saved: {p(s.name)} [{p(s.type)}]: {p(s.reason)}")
    lines += [f"  warning: {p(w)}" for w in r.warnings]
    return "\n".join(lines)


def format_resume(r: ResumeResult) -> str:
    """The report of a resume; names and reasons from the snapshot escaped (``printable``)."""
    p = printable
    lines = [f"resumed {r.snapshot_id} ({p(r.verdict.get('level', '?'))}): "
             f"{len(r.restored)} objects back in {r.seconds:.2f} s"]
    if r.restored:
        lines.append("  restored: " + p(", ".join(r.restored)))
    if r.state:
        lines.append("  state restored: " + p(", ".join(r.state)))
    for s in r.not_restored:
        lines.append(f"  not restored: {p(s.name)} [{p(s.type)}]: {p(s.reason)}")
    for line in r.packages:
        lines.append(f"  package: {p(line)}")
    for line in r.paths:
        lines.append(f"  extra path: {p(line)}")
    for w in r.warnings:
        lines.append(f"  warning: {p(w)}")
    for reason in r.verdict.get("reasons", []):
        lines.append(f"  note: {p(reason)}")
    return "\n".join(lines)


def _api():
    """``kernel_hooks.api``, imported by the first magic that needs it: the extension's load
    registers the magics without importing the store, torch or numpy (issue 31)."""
    from . import api

    return api


def _cell_progress():
    """A progress bar in the running cell (``progress.CellProgress``, imported with the first)."""
    from .progress import CellProgress

    return CellProgress()


def _age(created: str | None) -> str:
    if not created:
        return "?"
    try:
        then = datetime.fromisoformat(created)
    except ValueError:
        return created
    minutes = int((datetime.now(timezone.utc) - then).total_seconds() // 60)
    return f"{minutes} min ago" if minutes < 120 else f"{minutes // 60} h ago"


@magics_class
class ResumeMagics(Magics):
    """Checkpoint and resume the kernel's state (jupyter-gkeresume)."""

    def _run(self, action: Callable[[], object]) -> object:
        try:
            return action()
        except UsageError:
            raise
        except (InvalidInputError, SnapshotNotFoundError) as exc:
            raise UsageError(printable(exc)) from None
        except GkeResumeError as exc:
            raise MagicFailed(exc) from None

    @magic_arguments()
    @argument("-n", "--name", help="give the snapshot a name (%%resume NAME finds the newest one)")
    @line_magic
    def checkpoint(self, line: str = ""):
        """Write a snapshot of this kernel's variables (models, tensors, arrays, Python objects,
        RNG states) to the workspace store, and print its id, bytes written (new / reused), the
        time taken, and every object that could not be captured with the reason.
        """
        args = _parse(self.checkpoint, line)
        if args is None:
            return None
        print(format_checkpoint(self._run(lambda: _api().checkpoint(args.name, progress=_cell_progress()))))
        return None

    @magic_arguments()
    @line_magic
    def snapshots(self, line: str = ""):
        """List this workspace's snapshots, newest first: id, name, created, notebook, size,
        objects, and whether it can be restored here (exact, portable, partial, incompatible),
        with the packages installed in its session that a resume here would install.
        A "*" marks this notebook's snapshots (what %resume without an id chooses from).
        """
        if _parse(self.snapshots, line) is None:
            return None
        from jupyter_gkeresume.snapshot.cost import format_cost, workspace_cost

        rows = self._run(_api().list_snapshots)
        if not rows:
            print("no snapshots in this workspace yet (%checkpoint makes one)")
            return None
        here = this_notebook()
        print(f"  {'id':<24} {'name':<16} {'created':<12} {'notebook':<24} {'size':>9} "
              f"{'objects':>7} {'$/month':>8}  here")
        for r in rows:
            if r.error:
                print(f"  {r.snapshot_id:<24} unreadable: {printable(r.error)}")
                continue
            notebook = notebook_path(r.notebook)
            mark = "*" if here is not None and notebook == here else " "
            print(f"{mark} {r.snapshot_id:<24} {printable(r.name or '-'):<16} "
                  f"{printable(_age(r.created)):<12} {printable(shorten(notebook or '-', 24)):<24} "
                  f"{human_bytes(r.bytes):>9} {r.objects:>7} "
                  f"{format_cost(r.monthly_cost_usd).removesuffix('/month'):>8}  "
                  f"{r.verdict.level if r.verdict else '?'}")
            if r.packages:
                print(f"  {'':<24} a resume here installs: {', '.join(r.packages)}")
        usage = self._run(lambda: workspace_cost(_api().open_store()))
        print(f"workspace: {usage.snapshots} snapshots, {human_bytes(usage.bytes)} stored "
              f"(shared blobs once), about {format_cost(usage.monthly_usd)}")
        if here is not None:
            print(f"* = this notebook ({shorten(here, 60)})")
        return None

    @magic_arguments()
    @argument("reference", nargs="?", default=None, metavar="ID|NAME|latest",
              help="the snapshot to restore; default: the newest of this notebook")
    @argument("--any", action="store_true", dest="any_notebook",
              help="a snapshot of any notebook: latest means the newest of the whole "
                   "workspace, and an id or name of another notebook's snapshot restores here")
    @argument("--only", metavar="a,b", help="restore only these variables")
    @argument("--key-file", metavar="OLD", dest="key_file",
              help="verify this one snapshot (an explicit id) with an earlier key of this "
                   "workspace, from that file; a key that never signed here is refused")
    @argument("--replay", action="store_true",
              help="then rebuild what did not come back by re-running the cells of the input "
                   "history that defined it (and what those cells need); they run on a copy of "
                   "the namespace, and only the missing names are taken from it")
    @line_magic
    def resume(self, line: str = ""):
        """Restore a snapshot into this kernel and print what came back, what did not, and why.
        Without an id: the newest snapshot of this notebook. Tensors return to their device
        when it exists, else to the CPU (with a warning).
        """
        args = _parse(self.resume, line)
        if args is None:
            return None
        only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
        result = self._run(lambda: _api().resume(
            args.reference, any_notebook=args.any_notebook, only=only, key_file=args.key_file,
            progress=_cell_progress(), continuing_cell=True,
        ))
        print(format_resume(result))
        if args.replay:
            self._replay([s.name for s in result.not_restored if s.name.isidentifier()])
        return None

    def _replay(self, missing: list[str]) -> None:
        """Re-run the history cells that rebuild ``missing`` (``api.replay``), saying what ran."""
        if not missing:
            print("replay: nothing is missing")
            return

        def announce(plan: ReplayPlan) -> None:
            for name, why in plan.unresolved.items():
                print(f"replay: cannot rebuild {name}: {why}")
            if plan.cells:
                print("replay: re-running " + ", ".join(f"In[{n}]" for n in plan.cells))

        result = self._run(lambda: _api().replay(missing, on_plan=announce))
        if not result.cells:
            return
        if result.failed:
            print(f"replay: {result.failed}")
        print(f"replay: back: {', '.join(result.back) or 'nothing'}")

    @magic_arguments()
    @argument("-n", "--name", help="give the snapshot a name")
    @line_magic
    def pause(self, line: str = ""):
        """Pause this workspace: the jupyter-gkeresume server extension has the open labs save
        their notebooks, checkpoints every kernel of the workspace (not only this one) as soon as
        the running cells end, verifies the snapshots, then releases the pod (and its GPU).
        Follow it in the status bar or with GET /gkeresume/api/status. Without the server
        extension it checkpoints here and says that no release backend is configured.
        """
        args = _parse(self.pause, line)
        if args is None:
            return None
        from . import server_link  # urllib's HTTP client: not on every kernel's start (issue 31)

        if server_link.server_url() is None:
            print(format_checkpoint(self._run(lambda: _api().checkpoint(args.name,
                                                                      progress=_cell_progress()))))
            print("no release backend is configured here: the snapshot is saved, the pod is kept")
            return None
        self._run(lambda: _api().pause(args.name))
        print("pause requested: when the running cells end, the server has the open labs save "
              "their notebooks, checkpoints every kernel of this workspace, then releases the pod")
        return None
