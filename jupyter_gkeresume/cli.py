"""``jupyter gkeresume``: list, inspect, verify and clean up a workspace's snapshots.

Every command takes ``--store URL`` and ``--workspace ID`` (default: the same resolution as the
server, see ``workspace.py``), before or after the command name, and ``--json`` for scripts
(stdout is then one JSON document; progress and errors go to stderr). Exit codes: 0 success,
1 a verification or operation failed, 2 bad usage or input.

Commands needing the signing key (``list``, ``show``, ``verify``, ``rm`` by name) load it like the
kernel does (``GKERESUME_SIGNING_KEY``, ``GKERESUME_SIGNING_KEY_FILE``, or ``--key-file``).
Nothing here unpickles: inspecting or verifying an untrusted snapshot is safe.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from . import advisor
from .errors import GkeResumeError, InvalidInputError
from .paused_record import PausedRecords
from .snapshot import SnapshotStore, environment_fingerprint, list_snapshots, load_signing_key
from .snapshot.catalog import resolve
from .snapshot.compat import check_compatible
from .snapshot.cost import format_cost, monthly_cost, resolve_price
from .snapshot.gc import (
    DEFAULT_GRACE_SECONDS,
    apply_retention,
    collect_garbage,
    read_manifest,
    retention_plan,
)
from .snapshot.retention import RetentionPolicy
from .snapshot.signing import SigningKey, verify
from .snapshot.verify import verify_snapshot
from .units import human_bytes
from .workspace import resolve_store_url, resolve_workspace_id


class Progress:
    """A one-line progress bar on stderr (only when enabled: a terminal, or ``--progress``)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.shown = False

    def update(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        fraction = done / total if total else 1.0
        bar = "#" * int(fraction * 30)
        sys.stderr.write(f"\r{label:<10} [{bar:<30}] {fraction:6.1%} {done}/{total}")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            self.shown = False


class Context:
    """What every command gets: the parsed arguments, the store, the key (loaded on first use)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.store = SnapshotStore(
            resolve_store_url(args.store), resolve_workspace_id(args.workspace)
        )
        self.progress = Progress(sys.stderr.isatty() if args.progress is None else args.progress)
        self._key: SigningKey | None = None

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            if self.args.key_file and not os.path.isfile(self.args.key_file):
                raise InvalidInputError(f"--key-file {self.args.key_file} does not exist")
            self._key = load_signing_key(self.args.key_file)
        return self._key

    def emit(self, data: Any, human: Callable[[], None]) -> None:
        self.progress.close()
        if self.args.json:
            json.dump(data, sys.stdout, indent=1, sort_keys=True, default=str)
            sys.stdout.write("\n")
        else:
            human()


# -- commands -------------------------------------------------------------------------------
def cmd_list(ctx: Context) -> int:
    rows = list_snapshots(ctx.store, ctx.key, environment_fingerprint())

    def human() -> None:
        if not rows:
            print(f"no snapshots in {ctx.store}")
        for r in rows:
            if r.error:
                print(f"{r.snapshot_id}  REFUSED: {r.error}")
                continue
            print(f"{r.snapshot_id}  {r.name or '-':<16} {human_bytes(r.bytes):>10}  {r.objects:>4} "
                  f"objects  {r.verdict.level if r.verdict else '?'}"
                  + (f"  ({r.skipped} skipped)" if r.skipped else ""))

    ctx.emit([r.to_dict() for r in rows], human)
    return 0


def cmd_show(ctx: Context) -> int:
    snapshot_id = resolve(ctx.store, ctx.args.reference, ctx.key)
    manifest = read_manifest(ctx.store, snapshot_id)
    try:
        verify(manifest, ctx.key)
        signature = "valid"
    except GkeResumeError as exc:
        signature = str(exc)
    verdict = check_compatible(manifest, environment_fingerprint())
    data = {"manifest": manifest.to_dict(), "signature": signature, "verdict": verdict.to_dict()}

    def human() -> None:
        print(f"snapshot   {manifest.snapshot_id}" + (f" ({manifest.name})" if manifest.name else ""))
        print(f"created    {manifest.created}")
        print(f"notebook   {manifest.notebook or '-'}")
        print(f"size       {human_bytes(manifest.total_bytes)} in {len(manifest.blobs)} blobs")
        print(f"signature  {signature}")
        print(f"verdict    {verdict.level}")
        for reason in verdict.reasons:
            print(f"           - {reason}")
        fp = manifest.fingerprint
        gpus = [g.get("name") for g in (fp.get("cuda") or {}).get("gpus", [])
                if isinstance(g, dict)]
        print(f"made with  Python {fp.get('python', '?')}, "
              f"torch {(fp.get('packages') or {}).get('torch', '-')}, "
              f"GPUs {', '.join(map(str, gpus)) or 'none'}")
        print("objects:")
        for o in manifest.objects:
            where = f" on {o.device}" if o.device else ""
            why = f"  ({o.reason})" if o.reason else ""
            risk = f"  AT RISK: {verdict.objects_at_risk[o.name]}" if (
                o.name in verdict.objects_at_risk) else ""
            print(f"  {o.name:<20} {o.type:<28} {o.status:<8} {human_bytes(o.bytes):>10}{where}{why}"
                  f"{risk}")

    ctx.emit(data, human)
    return 0


def cmd_verify(ctx: Context) -> int:
    if ctx.args.all:
        ids = ctx.store.list_snapshot_ids()
    elif ctx.args.references:
        ids = [resolve(ctx.store, ref, ctx.key) for ref in ctx.args.references]
    else:
        raise InvalidInputError("verify needs snapshot ids or names, or --all")
    reports = []
    for snapshot_id in ids:
        reports.append(verify_snapshot(
            ctx.store, snapshot_id, ctx.key, trust=ctx.args.trust,
            progress=lambda done, total, i=snapshot_id: ctx.progress.update(i[-6:], done, total),
        ))
        ctx.progress.close()

    def human() -> None:
        for r in reports:
            state = "OK" if r.ok else "FAILED"
            print(f"{r.snapshot_id}  {state}  {r.blobs_checked} blobs, {human_bytes(r.bytes_checked)}, "
                  f"signature: {r.signature}")
            for problem in r.problems:
                print(f"  - {problem}")

    ctx.emit([r.to_dict() for r in reports], human)
    return 0 if all(r.ok for r in reports) else 1


def cmd_gc(ctx: Context) -> int:
    args = ctx.args
    policy = RetentionPolicy(keep_last=args.keep_last, keep_days=args.keep_days)
    plan = retention_plan(ctx.store, policy) if policy.active else None
    deleted = apply_retention(ctx.store, plan, dry_run=args.dry_run) if plan else []
    report = collect_garbage(
        ctx.store, grace_seconds=args.grace_hours * 3600, dry_run=args.dry_run,
        ignore=set(deleted) if args.dry_run else set(),
        progress=lambda phase, done, total: ctx.progress.update(phase, done, total),
    )
    report.snapshots_deleted = deleted
    data = {"retention": plan.to_dict() if plan else None, **report.to_dict()}

    def human() -> None:
        verb = "would delete" if args.dry_run else "deleted"
        for snapshot_id in deleted:
            print(f"{verb} snapshot {snapshot_id}")
        print(f"{verb} {len(report.swept)} of {report.blobs_total} blobs, "
              f"{'would free' if args.dry_run else 'freed'} {human_bytes(report.bytes_freed)} "
              f"({report.bytes_freed} bytes)")
        if report.young:
            print(f"kept {len(report.young)} unreferenced blobs younger than "
                  f"{args.grace_hours:g} h ({human_bytes(sum(report.young.values()))}): "
                  "a checkpoint may be writing them")

    ctx.emit(data, human)
    return 0


def cmd_rm(ctx: Context) -> int:
    ids = [resolve(ctx.store, ref, ctx.key) for ref in ctx.args.references]
    paused = PausedRecords(ctx.store).protected_ids() & set(ids)
    if paused and not ctx.args.force:
        raise InvalidInputError(
            f"{', '.join(sorted(paused))}: the paused workspace resumes from it; "
            "resume or discard the pause first, or pass --force"
        )
    for snapshot_id in ids:
        ctx.store.delete_manifest(snapshot_id)

    def human() -> None:
        for snapshot_id in ids:
            print(f"removed snapshot {snapshot_id}")
        print("its blobs are freed by `jupyter gkeresume gc` (those no other snapshot uses)")

    ctx.emit({"removed": ids}, human)
    return 0


def cmd_usage(ctx: Context) -> int:
    blobs = {b.digest: b.size for b in ctx.store.list_blobs()}
    per_snapshot, refs = {}, {}
    for snapshot_id in ctx.store.list_snapshot_ids():
        try:
            per_snapshot[snapshot_id] = read_manifest(ctx.store, snapshot_id).blobs
        except (GkeResumeError, FileNotFoundError):
            per_snapshot[snapshot_id] = {}
        for digest in per_snapshot[snapshot_id]:
            refs[digest] = refs.get(digest, 0) + 1
    stored = sum(blobs.values())
    referenced = sum(s for d, s in blobs.items() if d in refs)
    price = resolve_price(ctx.args.price_per_gib_month)
    rows = [{"id": i, "bytes": sum(b.values()),
             "exclusive_bytes": sum(s for d, s in b.items() if refs.get(d) == 1)}
            for i, b in per_snapshot.items()]
    data = {
        "snapshots": len(per_snapshot), "blobs": len(blobs), "stored_bytes": stored,
        "referenced_bytes": referenced, "unreferenced_bytes": stored - referenced,
        "price_per_gib_month": price, "monthly_cost_usd": monthly_cost(stored, price),
        "per_snapshot": rows,
    }

    def human() -> None:
        print(f"{len(per_snapshot)} snapshots, {len(blobs)} blobs, {human_bytes(stored)} stored "
              f"({human_bytes(stored - referenced)} unreferenced: `gc` frees it)")
        print(f"estimated cost: {format_cost(data['monthly_cost_usd'])} at ${price:g}/GiB-month")
        for r in rows:
            print(f"  {r['id']}  {human_bytes(r['bytes']):>10}  "
                  f"({human_bytes(r['exclusive_bytes'])} its own)")

    ctx.emit(data, human)
    return 0


def cmd_advise(ctx: Context) -> int:
    advice = advisor.advise(advisor.read_events(ctx.store), ctx.args.thresholds,
                            gpus=ctx.args.gpus)
    if ctx.args.plot:
        advisor.plot(advice, ctx.args.plot)

    def human() -> None:
        source = "measured" if advice.measured else "assumed (no pauses recorded yet)"
        print(f"{advice.hours_observed:.1f} h observed, {advice.gpus} GPU(s); pause "
              f"{advice.pause_seconds:.0f} s, resume {advice.resume_seconds:.0f} s ({source})")
        print(f"{'idle after':>10}  {'GPU-h held':>10}  {'GPU-h freed':>11}  {'pauses':>6}  "
              f"{'user wait':>9}")
        for o in advice.outcomes:
            label = "never" if o.threshold_minutes is None else f"{o.threshold_minutes:g} min"
            print(f"{label:>10}  {o.gpu_hours_held:>10.2f}  {o.gpu_hours_released:>11.2f}  "
                  f"{o.pauses:>6}  {o.user_wait_minutes:>7.1f} m")
        if ctx.args.plot:
            print(f"plot written to {ctx.args.plot}")

    ctx.emit(advice.to_dict(), human)
    return 0


# -- parsing ----------------------------------------------------------------------------------
def thresholds(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of minutes: {text!r}") from None


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name (after: defaults suppressed,
    so they do not overwrite what was given before)."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--store", default=default(None),
                        help="store URL (default: GKERESUME_STORE, else the local store)")
    parser.add_argument("--workspace", default=default(None),
                        help="workspace id (default: resolved like the server does)")
    parser.add_argument("--key-file", default=default(None), help="signing key file")
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print one JSON document for scripts")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction,
                        default=default(None), help="progress bars (default: on a terminal)")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    main = argparse.ArgumentParser(
        prog="jupyter gkeresume", description="List, inspect, verify and clean up snapshots."
    )
    _global_options(main, suppress=False)
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[Context], int], text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        p.set_defaults(func=func)
        return p

    command("list", cmd_list, "every snapshot, newest first, with its verdict here")
    p = command("show", cmd_show, "objects, sizes, fingerprint and verdict of one snapshot")
    p.add_argument("reference", help="snapshot id, name, or 'latest'")
    p = command("verify", cmd_verify, "check signatures and every blob digest (exit 1 if bad)")
    p.add_argument("references", nargs="*", help="snapshot ids or names")
    p.add_argument("--all", action="store_true", help="verify every snapshot")
    p.add_argument("--trust", action="store_true",
                   help="trust these snapshots explicitly: a bad signature is not a failure")
    p = command("gc", cmd_gc, "apply retention, then free blobs no snapshot references")
    p.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    p.add_argument("--keep-last", type=int, help="keep the N newest snapshots")
    p.add_argument("--keep-days", type=float, help="keep snapshots newer than D days")
    p.add_argument("--grace-hours", type=float, default=DEFAULT_GRACE_SECONDS / 3600,
                   help="never delete blobs younger than this (default: %(default)g)")
    p = command("rm", cmd_rm, "remove snapshots (then `gc` frees their blobs)")
    p.add_argument("references", nargs="+", help="snapshot ids or names")
    p.add_argument("--force", action="store_true", help="even one the paused record needs")
    p = command("usage", cmd_usage, "bytes, snapshots and estimated monthly cost")
    p.add_argument("--price-per-gib-month", type=float,
                   help="USD (default: GKERESUME_PRICE_PER_GIB_MONTH, else GCS Standard $0.020)")
    p = command("advise", cmd_advise, "replay recorded activity under candidate idle thresholds")
    p.add_argument("--thresholds", type=thresholds,
                   default=list(advisor.DEFAULT_THRESHOLDS_MINUTES), help="minutes, e.g. 5,15,60")
    p.add_argument("--gpus", type=int, help="GPUs per pod (default: as recorded)")
    p.add_argument("--plot", help="write a PNG plot to this path")
    return main


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``jupyter-gkeresume`` (and so ``jupyter gkeresume``)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(Context(args))
    except InvalidInputError as exc:
        print(f"jupyter gkeresume: error: {exc}", file=sys.stderr)
        return 2
    except GkeResumeError as exc:
        print(f"jupyter gkeresume: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:  # removed by someone else while this command ran
        print(f"jupyter gkeresume: error: no longer in the store: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
