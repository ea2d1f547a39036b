"""The magics: %checkpoint, %snapshots, %resume, %pause. Each docstring is its --help.

User mistakes raise ``UsageError`` (IPython shows the message, no traceback); domain failures are
printed as one clear line, never as a traceback from deep inside.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from datetime import datetime, timezone

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_gkeresume.errors import GkeResumeError, InvalidInputError, SnapshotNotFoundError
from jupyter_gkeresume.snapshot.cost import format_cost, workspace_cost
from jupyter_gkeresume.units import human_bytes

from . import api, server_link
from .progress import CellProgress
from .replay import plan_replay
from .results import CheckpointResult, ResumeResult


class MagicFailed(GkeResumeError):
    """A domain failure shown as one line (IPython calls ``_render_traceback_``)."""

    def __init__(self, cause: GkeResumeError):
        super().__init__(str(cause))
        self.cause = cause

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self.cause).__name__}: {self.cause}"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit the kernel's process
        raise UsageError(f"{self.prog}: {message}")


def _parse(doc: str | None, prog: str, line: str, setup: Callable[[_Parser], None]):
    try:
        args = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%{prog}: {exc}") from None
    if "-h" in args or "--help" in args:
        print(doc)
        return None
    parser = _Parser(prog=f"%{prog}", add_help=False)
    setup(parser)
    return parser.parse_args(args)


def format_checkpoint(r: CheckpointResult) -> str:
    lines = [
        f"checkpoint {r.snapshot_id}" + (f" ({r.name})" if r.name else "")
        + f": {len(r.saved)} objects, {human_bytes(r.bytes_total)} "
        f"({human_bytes(r.bytes_new)} new, {human_bytes(r.bytes_reused)} reused) in {r.seconds:.2f} s",
    ]
    for s in r.skipped:
        lines.append(f"  not captured: {s.name} [{s.type}]: {s.reason}")
    lines += [f"  warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def format_resume(r: ResumeResult) -> str:
    lines = [f"resumed {r.snapshot_id} ({r.verdict.get('level', '?')}): "
             f"{len(r.restored)} objects back in {r.seconds:.2f} s"]
    if r.restored:
        lines.append("  restored: " + ", ".join(r.restored))
    for s in r.not_restored:
        lines.append(f"  not restored: {s.name} [{s.type}]: {s.reason}")
    for w in r.warnings:
        lines.append(f"  warning: {w}")
    for reason in r.verdict.get("reasons", []):
        lines.append(f"  note: {reason}")
    return "\n".join(lines)


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
            raise UsageError(str(exc)) from None
        except GkeResumeError as exc:
            raise MagicFailed(exc) from None

    @line_magic
    def checkpoint(self, line: str = ""):
        """%checkpoint [-n NAME]

        Write a snapshot of this kernel's variables (models, tensors, arrays, Python objects,
        RNG states) to the workspace store, and print its id, bytes written (new / reused), the
        time taken, and every object that could not be captured with the reason.

        Options:
          -n NAME, --name NAME   give the snapshot a name (%resume NAME finds the newest one)
        """
        args = _parse(self.checkpoint.__doc__, "checkpoint", line,
                      lambda p: p.add_argument("-n", "--name"))
        if args is None:
            return None
        print(format_checkpoint(self._run(lambda: api.checkpoint(args.name, progress=CellProgress()))))
        return None

    @line_magic
    def snapshots(self, line: str = ""):
        """%snapshots

        List this workspace's snapshots, newest first: id, name, created, notebook, size,
        objects, and whether it can be restored here (exact, portable, partial, incompatible).
        """
        if _parse(self.snapshots.__doc__, "snapshots", line, lambda p: None) is None:
            return None
        rows = self._run(api.list_snapshots)
        if not rows:
            print("no snapshots in this workspace yet (%checkpoint makes one)")
            return None
        print(f"{'id':<24} {'name':<16} {'created':<12} {'notebook':<24} {'size':>9} "
              f"{'objects':>7} {'$/month':>8}  here")
        for r in rows:
            if r.error:
                print(f"{r.snapshot_id:<24} unreadable: {r.error}")
                continue
            print(f"{r.snapshot_id:<24} {(r.name or '-'):<16} {_age(r.created):<12} "
                  f"{(r.notebook or '-')[-24:]:<24} {human_bytes(r.bytes):>9} {r.objects:>7} "
                  f"{format_cost(r.monthly_cost_usd).removesuffix('/month'):>8}  "
                  f"{r.verdict.level if r.verdict else '?'}")
        usage = self._run(lambda: workspace_cost(api.open_store()))
        print(f"workspace: {usage.snapshots} snapshots, {human_bytes(usage.bytes)} stored "
              f"(shared blobs once), about {format_cost(usage.monthly_usd)}")
        return None

    @line_magic
    def resume(self, line: str = ""):
        """%resume [ID|NAME|latest] [--only a,b] [--trust] [--replay]

        Restore a snapshot into this kernel (default: the latest) and print what came back,
        what did not, and why. Tensors return to their device when it exists, else to the CPU
        (with a warning).

        Options:
          --only a,b   restore only these variables
          --trust      accept this one snapshot even though its signature does not verify
          --replay     then rebuild what did not come back by re-running the cells of the
                       input history that defined it (and what those cells need); they run on a
                       copy of the namespace, and only the missing names are taken from it
        """
        def setup(p: _Parser) -> None:
            p.add_argument("reference", nargs="?", default="latest")
            p.add_argument("--only")
            p.add_argument("--trust", action="store_true")
            p.add_argument("--replay", action="store_true")

        args = _parse(self.resume.__doc__, "resume", line, setup)
        if args is None:
            return None
        only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
        result = self._run(lambda: api.resume(
            args.reference, only=only, trust=args.trust, progress=CellProgress(),
            continuing_cell=True,
        ))
        print(format_resume(result))
        if args.replay:
            self._replay([s.name for s in result.not_restored if s.name.isidentifier()])
        return None

    def _replay(self, missing: list[str]) -> None:
        """Re-run the history cells that rebuild ``missing`` (``replay.plan_replay``)."""
        if not missing:
            print("replay: nothing is missing")
            return
        shell = self.shell
        plan = plan_replay(list(shell.history_manager.input_hist_raw), missing)
        for name, why in plan.unresolved.items():
            print(f"replay: cannot rebuild {name}: {why}")
        if not plan.cells:
            return
        print("replay: re-running " + ", ".join(f"In[{n}]" for n in plan.cells))
        scratch = dict(shell.user_ns)
        for number, source in zip(plan.cells, plan.sources, strict=True):
            try:
                exec(compile(shell.transform_cell(source), f"<replay In[{number}]>", "exec"),
                     scratch)
            except Exception as exc:  # the user's own cell failed: say which, keep the rest
                print(f"replay: In[{number}] failed: {type(exc).__name__}: {exc}")
                break
        back = [n for n in missing if n in scratch]
        shell.user_ns.update({n: scratch[n] for n in back})
        print(f"replay: back: {', '.join(back) or 'nothing'}")

    @line_magic
    def pause(self, line: str = ""):
        """%pause [-n NAME]

        Pause this workspace: the jupyter-gkeresume server extension checkpoints the kernels as
        soon as this cell ends, verifies the snapshots, then releases the pod (and its GPU).
        Follow it in the status bar or with GET /gkeresume/api/status. Without the server
        extension it checkpoints here and says that no release backend is configured.

        Options:
          -n NAME, --name NAME   give the snapshot a name
        """
        args = _parse(self.pause.__doc__, "pause", line, lambda p: p.add_argument("-n", "--name"))
        if args is None:
            return None
        if server_link.server_url() is None:
            print(format_checkpoint(self._run(lambda: api.checkpoint(args.name,
                                                                      progress=CellProgress()))))
            print("no release backend is configured here: the snapshot is saved, the pod is kept")
            return None
        self._run(lambda: server_link.request_pause(args.name))
        print("pause requested: the server checkpoints this workspace when this cell ends, "
              "then releases the pod")
        return None
