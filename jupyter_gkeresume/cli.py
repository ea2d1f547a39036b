"""``jupyter gkeresume``: list, inspect, verify and clean up a workspace's snapshots; ``doctor``
says what the product will do in this pod and proves each part (``doctor.py``).

A Jupyter application with one subcommand per command (like ``jupyter labextension``). It reads
``c.GkeResume.*`` from the server's own config files (``jupyter_server_config.py``/``.json``/
``.d`` in the Jupyter config path), so the CLI sees the store and workspace the server sees;
``--store URL`` and ``--workspace ID`` (before or after the command name) override them, then
the same resolution as the server applies (``workspace.py``). ``--json`` for scripts (stdout is
then one JSON document; progress and errors go to stderr), ``--version``, ``--log-level``.
Exit codes: 0 success, 1 a verification or operation failed, 2 bad usage or input. An object
store that does not answer fails within ``c.CommandApp.store_timeout`` seconds, in one line.

Commands needing the signing key (``list``, ``show``, ``verify``, ``rm`` by name) load it like the
kernel does (``GKERESUME_SIGNING_KEY``, ``GKERESUME_SIGNING_KEY_FILE``); ``--key-file OLD``
verifies with that key instead, an earlier key of this workspace after a key change, and is
refused unless it signed a snapshot of this workspace here (``signing.key_of_workspace``).
Nothing here unpickles: inspecting or verifying an untrusted snapshot is safe. Every stored
string is printed through ``printable`` (no control character reaches the terminal), and of a
snapshot whose signature does not verify only its id and the reason are shown.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from jupyter_core.application import JupyterApp
from traitlets import Bool, Float, Integer, Unicode, default

from . import __version__, advisor, doctor
from .app import GkeResume
from .errors import GkeResumeError, InvalidInputError, ManifestError, StoreError
from .paused_record import PausedRecords
from .printable import printable
from .running_server import request_json, running_servers
from .snapshot import SnapshotStore, environment_fingerprint, list_snapshots, load_signing_key
from .snapshot.catalog import resolve
from .snapshot.compat import check_compatible
from .snapshot.cost import format_cost, monthly_cost, resolve_price
from .snapshot.gc import DEFAULT_GRACE_SECONDS, apply_retention, collect_garbage, retention_plan
from .snapshot.manifests import read_manifest, scan_manifests
from .snapshot.retention import RetentionPolicy
from .snapshot.signing import SigningKey, key_of_workspace
from .snapshot.store import _transport_errors, describe
from .snapshot.verify import verify_snapshot
from .units import human_bytes
from .workspace import WORKSPACE_RE


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
    """What every command gets: its options (``args``), the store, the key (loaded on first use).

    ``results``: when set (``gc --all-workspaces --json``), ``emit`` files this workspace's
    document there instead of printing it, so stdout stays one JSON document.
    """

    def __init__(self, args: SimpleNamespace, store: SnapshotStore,
                 results: dict[str, Any] | None = None):
        self.args = args
        self.store = store
        self.progress = Progress(sys.stderr.isatty() if args.progress is None else args.progress)
        self.results = results
        self._key: SigningKey | None = None

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            if not self.args.key_file:
                self._key = load_signing_key(workspace=self.store.workspace)
            elif not os.path.isfile(self.args.key_file):
                raise InvalidInputError(f"--key-file {self.args.key_file} does not exist")
            else:
                self._key = key_of_workspace(self.args.key_file, self.store.workspace)
        return self._key

    def emit(self, data: Any, human: Callable[[], None]) -> None:
        self.progress.close()
        if self.args.json and self.results is not None:
            self.results[self.store.workspace] = data
        elif self.args.json:
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
                print(f"{r.snapshot_id}  REFUSED: {printable(r.error)}")
                continue
            print(f"{r.snapshot_id}  {printable(r.name or '-'):<16} {human_bytes(r.bytes):>10}  "
                  f"{r.objects:>4} objects  {r.verdict.level if r.verdict else '?'}"
                  + (f"  ({r.skipped} skipped)" if r.skipped else ""))

    ctx.emit([r.to_dict() for r in rows], human)
    return 0


def cmd_show(ctx: Context) -> int:
    snapshot_id = resolve(ctx.store, ctx.args.reference, ctx.key)
    stored = read_manifest(ctx.store, snapshot_id, ctx.key)
    if stored.manifest is None:
        raise ManifestError(stored.unreadable)
    if stored.refused:  # nothing of a manifest that did not verify is shown or looked up
        ctx.emit({"id": snapshot_id, "signature": stored.refused, "manifest": None,
                  "verdict": None},
                 lambda: print(f"snapshot   {snapshot_id}\nsignature  REFUSED: "
                               f"{printable(stored.refused)}\ncontents   not shown: the "
                               "signature did not verify"))
        return 1
    manifest = stored.manifest
    verdict = check_compatible(manifest, environment_fingerprint())
    data = {"manifest": manifest.to_dict(), "signature": "valid", "verdict": verdict.to_dict()}

    def human() -> None:
        p = printable  # signed text may still hold control characters
        print(f"snapshot   {manifest.snapshot_id}" + (f" ({p(manifest.name)})" if manifest.name else ""))
        print(f"created    {p(manifest.created)}")
        print(f"notebook   {p(manifest.notebook or '-')}")
        print(f"size       {human_bytes(manifest.total_bytes)} in {len(manifest.blobs)} blobs")
        print("signature  valid")
        print(f"verdict    {verdict.level}")
        for reason in verdict.reasons:
            print(f"           - {p(reason)}")
        fp = manifest.fingerprint
        gpus = [g.get("name") for g in (fp.get("cuda") or {}).get("gpus", [])
                if isinstance(g, dict)]
        print(f"made with  Python {p(fp.get('python', '?'))}, "
              f"torch {p((fp.get('packages') or {}).get('torch', '-'))}, "
              f"GPUs {p(', '.join(map(str, gpus)) or 'none')}")
        print("objects:")
        for o in manifest.objects:
            where = f" on {p(o.device)}" if o.device else ""
            why = f"  ({p(o.reason)})" if o.reason else ""
            risk = f"  AT RISK: {p(verdict.objects_at_risk[o.name])}" if (
                o.name in verdict.objects_at_risk) else ""
            print(f"  {p(o.name):<20} {p(o.type):<28} {p(o.status):<8} {human_bytes(o.bytes):>10}"
                  f"{where}{why}{risk}")

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
            ctx.store, snapshot_id, ctx.key,
            progress=lambda done, total, i=snapshot_id: ctx.progress.update(i[-6:], done, total),
        ))
        ctx.progress.close()

    def human() -> None:
        for r in reports:
            state = "OK" if r.ok else "FAILED"
            print(f"{r.snapshot_id}  {state}  {r.blobs_checked} blobs, {human_bytes(r.bytes_checked)}, "
                  f"signature: {printable(r.signature)}")
            for problem in r.problems:
                print(f"  - {printable(problem)}")

    ctx.emit([r.to_dict() for r in reports], human)
    return 0 if all(r.ok for r in reports) else 1


def cmd_gc(ctx: Context) -> int:
    args = ctx.args
    policy = RetentionPolicy(keep_last=args.keep_last, keep_days=args.keep_days)
    plan = retention_plan(ctx.store, policy, ctx.key) if policy.active else None
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
        for snapshot_id, why in report.unreadable.items():
            print(f"snapshot {snapshot_id} cannot be read: {printable(why)}", file=sys.stderr)

    ctx.emit(data, human)
    return 1 if report.unreadable else 0


def cmd_rm(ctx: Context) -> int:
    ids = [resolve(ctx.store, ref, ctx.key) for ref in ctx.args.references]
    paused = PausedRecords(ctx.store, lambda: ctx.key).protected_ids() & set(ids)
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
    for stored in scan_manifests(ctx.store, None):  # sizes only: no signature needed
        snapshot_id = stored.snapshot_id
        per_snapshot[snapshot_id] = stored.manifest.blobs if stored.manifest else {}
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


# -- every workspace ---------------------------------------------------------------------------
def list_workspaces(store: SnapshotStore) -> list[str]:
    """The workspace ids that have a folder under ``store``'s root (for the admin's CronJob)."""
    try:
        entries = store.fs.ls(store.root.rsplit("/", 1)[0], detail=True)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, *_transport_errors()) as exc:
        raise StoreError(f"cannot list the workspaces of {store}: {describe(exc)}") from None
    names = sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries
                   if e.get("type") == "directory")
    return [n for n in names if WORKSPACE_RE.fullmatch(n) and ".." not in n]


def gc_every_workspace(ctx: Context) -> int:
    """``gc --all-workspaces``: ``cmd_gc`` for each workspace of the store, one after another;
    with ``--json`` one document ``{workspace: report}``. A workspace whose gc fails (a store
    error) is reported (``{"error": ...}`` in JSON, a line on stderr) and the next one still
    runs; the exit code is then 1, as when a workspace had a manifest that cannot be parsed
    (skipped and reported: ``unreadable``)."""
    results: dict[str, Any] | None = {} if ctx.args.json else None
    failed = False
    for workspace in list_workspaces(ctx.store):
        if results is None:
            print(f"workspace {workspace}:")
        try:
            failed |= cmd_gc(Context(ctx.args, SnapshotStore(ctx.store.url, workspace),
                                     results)) != 0
        except GkeResumeError as exc:
            failed = True
            ctx.progress.close()
            print(f"jupyter gkeresume: error: {workspace}: {exc}", file=sys.stderr)
            if results is not None:
                results[workspace] = {"error": str(exc)}
    if results is not None:
        ctx.emit(results, lambda: None)
    return 1 if failed else 0


# -- the Jupyter application -------------------------------------------------------------------
def thresholds(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InvalidInputError(f"--thresholds: not a list of minutes: {text!r}") from None


COMMON_ALIASES = {
    "log-level": "Application.log_level",
    "config": "JupyterApp.config_file",
    "store": "GkeResume.store_url",
    "workspace": "GkeResume.workspace_id",
    "key-file": "CommandApp.key_file",
}
COMMON_FLAGS = {
    "debug": ({"Application": {"log_level": logging.DEBUG}}, "log level DEBUG"),
    "json": ({"CommandApp": {"json": True}}, "print one JSON document for scripts"),
    "progress": ({"CommandApp": {"progress": True}}, "progress bars (default: on a terminal)"),
    "no-progress": ({"CommandApp": {"progress": False}}, "no progress bars"),
}
VALUE_OPTIONS = {f"--{name}" for name in COMMON_ALIASES}


class CommandApp(JupyterApp):
    """One ``jupyter gkeresume`` command. Its configuration: ``c.GkeResume.*`` from the
    server's config files (``jupyter_server_config.py``/``.json`` in the Jupyter config path),
    then the command line (``--store`` sets ``GkeResume.store_url``, ``--workspace``
    ``GkeResume.workspace_id``). ``start`` runs ``run(Context)`` and returns the exit code."""

    version = __version__
    classes = [GkeResume]
    aliases = COMMON_ALIASES
    flags = COMMON_FLAGS
    positional = ""  # name of the positional arguments in ``ctx.args`` ("" = none allowed)
    nargs = "*"  # "1": exactly one, "+": at least one, "*": any number

    key_file = Unicode(None, allow_none=True,
                       help="verify with the key in this file, an earlier key of this workspace "
                            "(refused unless it signed a snapshot of it here)").tag(config=True)
    json = Bool(False, help="print one JSON document for scripts").tag(config=True)
    progress = Bool(None, allow_none=True, help="progress bars (None: on a terminal)"
                    ).tag(config=True)
    store_timeout = Float(
        10.0, help="Seconds the first request to an object store may take (0: no limit)."
    ).tag(config=True)

    @default("config_file_name")
    def _config_file_name(self) -> str:
        return "jupyter_server_config"  # the server's files: both read c.GkeResume.*

    def get_default_logging_config(self) -> dict[str, Any]:
        config = super().get_default_logging_config()
        # gcsfs logs a traceback for every request it gives up on; the command reports the
        # failure itself, in one line. --debug shows them.
        level = "DEBUG" if self.log_level <= logging.DEBUG else "CRITICAL"
        config["loggers"]["gcsfs"] = {"level": level, "handlers": ["console"], "propagate": False}
        return config

    command: Callable[[Context], int]  # the command body (``cmd_*``), set by each subclass
    own_options: tuple[str, ...] = ()  # this command's traits that the body reads in ctx.args

    def run(self, ctx: Context) -> int:
        return type(self).command(ctx)

    def options(self) -> dict[str, Any]:
        """This command's own options, as the command bodies read them from ``ctx.args``."""
        return {name: getattr(self, name) for name in self.own_options}

    def arguments(self) -> dict[str, Any]:
        given = list(self.extra_args)
        if not self.positional:
            if given:
                raise InvalidInputError(f"{self.name} takes no arguments: {' '.join(given)}")
            return {}
        if (self.nargs == "1" and len(given) != 1) or (self.nargs == "+" and not given):
            wanted = "one" if self.nargs == "1" else "one or more"
            raise InvalidInputError(f"{self.name} needs {wanted} {self.positional}")
        return {self.positional: given[0] if self.nargs == "1" else given}

    def start(self) -> int:
        settings = GkeResume(parent=self)
        args = SimpleNamespace(key_file=self.key_file, json=self.json, progress=self.progress,
                               **self.arguments(), **self.options())
        store = SnapshotStore(settings.resolved_store_url(), settings.resolved_workspace_id())
        store.check_reachable(self.store_timeout)
        return self.run(Context(args, store))


class ListApp(CommandApp):
    name = "list"
    command = staticmethod(cmd_list)
    description = "every snapshot, newest first, with its verdict here"


class ShowApp(CommandApp):
    name = "show"
    command = staticmethod(cmd_show)
    description = "objects, sizes, fingerprint and verdict of one snapshot (id, name or 'latest')"
    positional, nargs = "reference", "1"


class VerifyApp(CommandApp):
    name = "verify"
    command = staticmethod(cmd_verify)
    description = "check signatures and every blob digest (exit 1 if bad)"
    positional = "references"
    flags = {**COMMON_FLAGS,
             "all": ({"VerifyApp": {"all": True}}, "verify every snapshot")}
    all = Bool(False, help="verify every snapshot").tag(config=True)

    own_options = ("all",)


class GcApp(CommandApp):
    name = "gc"
    command = staticmethod(cmd_gc)
    description = "apply retention, then free blobs no snapshot references"
    aliases = {**COMMON_ALIASES, "keep-last": "GcApp.keep_last", "keep-days": "GcApp.keep_days",
               "grace-hours": "GcApp.grace_hours"}
    flags = {**COMMON_FLAGS,
             "dry-run": ({"GcApp": {"dry_run": True}}, "say what would go, delete nothing"),
             "all-workspaces": ({"GcApp": {"all_workspaces": True}},
                                "every workspace under the store root (the admin's CronJob)")}
    dry_run = Bool(False, help="say what would go, delete nothing").tag(config=True)
    keep_last = Integer(None, allow_none=True, help="keep the N newest snapshots").tag(config=True)
    keep_days = Float(None, allow_none=True, help="keep snapshots newer than D days"
                      ).tag(config=True)
    grace_hours = Float(DEFAULT_GRACE_SECONDS / 3600,
                        help="never delete blobs younger than this").tag(config=True)
    all_workspaces = Bool(False, help="every workspace under the store root").tag(config=True)

    own_options = ("dry_run", "keep_last", "keep_days", "grace_hours")

    def run(self, ctx: Context) -> int:
        if not self.all_workspaces:
            return super().run(ctx)
        if GkeResume(parent=self).workspace_id:
            raise InvalidInputError("--all-workspaces and --workspace exclude each other")
        return gc_every_workspace(ctx)


class RmApp(CommandApp):
    name = "rm"
    command = staticmethod(cmd_rm)
    description = "remove snapshots (then `gc` frees their blobs)"
    positional, nargs = "references", "+"
    flags = {**COMMON_FLAGS,
             "force": ({"RmApp": {"force": True}}, "even one the paused record needs")}
    force = Bool(False, help="even one the paused record needs").tag(config=True)

    own_options = ("force",)


class UsageApp(CommandApp):
    name = "usage"
    command = staticmethod(cmd_usage)
    description = "bytes, snapshots and estimated monthly cost"
    aliases = {**COMMON_ALIASES, "price-per-gib-month": "UsageApp.price_per_gib_month"}
    price_per_gib_month = Float(
        None, allow_none=True,
        help="USD (default: GKERESUME_PRICE_PER_GIB_MONTH, else GCS Standard $0.020)",
    ).tag(config=True)

    own_options = ("price_per_gib_month",)


class AdviseApp(CommandApp):
    name = "advise"
    command = staticmethod(cmd_advise)
    description = "replay recorded activity under candidate idle thresholds"
    aliases = {**COMMON_ALIASES, "thresholds": "AdviseApp.thresholds", "gpus": "AdviseApp.gpus",
               "plot": "AdviseApp.plot"}
    thresholds = Unicode(",".join(f"{t:g}" for t in advisor.DEFAULT_THRESHOLDS_MINUTES),
                         help="minutes, e.g. 5,15,60").tag(config=True)
    gpus = Integer(None, allow_none=True, help="GPUs per pod (default: as recorded)"
                   ).tag(config=True)
    plot = Unicode(None, allow_none=True, help="write a PNG plot to this path").tag(config=True)

    def options(self) -> dict[str, Any]:
        return {"thresholds": thresholds(self.thresholds), "gpus": self.gpus, "plot": self.plot}


class DoctorApp(CommandApp):
    """Runs ``doctor.run_checks``. What it says about the running server (idle timeout,
    budget, store, backend) comes from that server when one answers ``GET
    gkeresume/api/doctor`` (``running_server``: the server that started this shell, else the
    runtime files); otherwise from this pod's configuration files (``c.GkeResume.*``, the
    release backend's ``c.<Backend>.*``, ``c.ServerApp.base_url``, the image's
    ``jupyter_server_config.py`` included, then the command line), and the output says so.
    ``--no-server``, or any configuration on the command line (``--store``, ``--GkeResume.*``,
    ...), skips the server. Checks run here are printed as each ends."""

    name = "doctor"
    description = "what the product will do in this pod, each part proven (exit 1 if any fails)"
    aliases = {**COMMON_ALIASES, "podinfo-dir": "DoctorApp.podinfo_dir",
               "grace-seconds": "DoctorApp.grace_seconds"}
    flags = {**COMMON_FLAGS,
             "no-server": ({"DoctorApp": {"ask_server": False}},
                           "check the configuration files only, even with a server running")}
    podinfo_dir = Unicode("/etc/podinfo", help="where the downward API volume is mounted (its "
                          "annotations file shows sidecars)").tag(config=True)
    grace_seconds = Float(None, allow_none=True, help="the pod's grace after SIGTERM "
                          "(terminationGracePeriodSeconds; KubeSpawner's delete_grace_period "
                          "on JupyterHub), when known: the budget is checked against it"
                          ).tag(config=True)
    ask_server = Bool(True, help="ask the running server for its checks (GET "
                      "gkeresume/api/doctor)").tag(config=True)
    server_timeout = Float(120.0, help="seconds the running server may take to answer "
                           "(it runs every check, each bounded)").tag(config=True)

    def start(self) -> int:
        self.arguments()  # none allowed
        given = sorted(f"{section}.{name}" for section, values in self.cli_config.items()
                       if section not in OWN_SECTIONS for name in values)
        if given:  # a configuration asked about: the server's would not answer the question
            report, why = None, f"the command line sets {', '.join(given)}"
        else:
            report, why = self._from_server() if self.ask_server else (None, "--no-server")
        if report is None:
            source = f"the configuration files only ({why})"
            if not self.json:
                print(f"source: {source}", flush=True)
            report = doctor.run_checks(self._inputs(), on_check=None if self.json else _print)
            report.source = source
        elif not self.json:
            print(f"source: {report.source}")
            for check in report.checks:
                _print(check)
        if self.json:
            json.dump(doctor.to_json(report), sys.stdout, indent=1)
            sys.stdout.write("\n")
        return 0 if report.ok else 1

    def _inputs(self) -> doctor.DoctorInputs:
        settings = GkeResume(parent=self)
        server = self.config.get("ServerApp", {})
        return doctor.DoctorInputs(
            workspace_id=settings.workspace_id, store_url=settings.store_url,
            backend=settings.backend_class()(parent=self),
            release_backend_setting=settings.release_backend
            if isinstance(settings.release_backend, str) else "configured",
            base_url=server.get("base_url"),
            shutdown_budget=settings.resolved_shutdown_budget(),  # $GKERESUME_SHUTDOWN_BUDGET
            idle_timeout=settings.resolved_idle_timeout(),  # $GKERESUME_IDLE_TIMEOUT
            idle_pause_busy=settings.idle_pause_busy, key_file=self.key_file,
            podinfo_dir=self.podinfo_dir, store_timeout=self.store_timeout,
            grace_seconds=self.grace_seconds,
        )

    def _from_server(self) -> tuple[doctor.Report | None, str]:
        """The first running server's own report, or None and why there is none."""
        urls = running_servers()
        if not urls:
            return None, "no running jupyter server found"
        reasons = []
        for url in urls:
            print(f"asking the running server at {url} (--no-server: the configuration "
                  "files only) ...", file=sys.stderr, flush=True)
            try:
                data = request_json(url, "gkeresume/api/doctor", what="the doctor's checks",
                                    timeout=self.server_timeout)
                return doctor.from_json(data, f"the running server at {url}"), ""
            except (GkeResumeError, ValueError) as exc:
                reasons.append(str(exc))
        return None, "; ".join(reasons)


OWN_SECTIONS = {"Application", "JupyterApp", "CommandApp", "DoctorApp"}
"""Options of the command itself; any other on the command line describes a configuration, which
the doctor then checks instead of asking the running server."""


def _print(check: doctor.Check) -> None:
    status = "FAIL" if not check.ok else "WARN" if check.warning else "ok"
    print(f"{status:<4}  {check.name:<11}  {printable(check.detail)}", flush=True)


COMMANDS = (ListApp, ShowApp, VerifyApp, GcApp, RmApp, UsageApp, AdviseApp, DoctorApp)


class GkeResumeCLI(JupyterApp):
    """``jupyter gkeresume COMMAND``: the commands as subcommands, like ``jupyter labextension``."""

    name = "jupyter-gkeresume"
    description = "List, inspect, verify and clean up snapshots; check this pod (doctor)."
    version = __version__
    aliases = {name: COMMON_ALIASES[name] for name in ("log-level", "config")}
    flags = {"debug": COMMON_FLAGS["debug"]}
    # factories, not classes: traitlets would make each command a process-wide singleton
    subcommands = {cls.name: (lambda parent, cls=cls: cls(parent=parent), cls.description)
                   for cls in COMMANDS}

    def parse_command_line(self, argv: list[str] | None = None) -> None:
        super().parse_command_line(command_first(sys.argv[1:] if argv is None else argv))

    def start(self) -> int:
        if self.subapp is None:
            known = ", ".join(self.subcommands)
            given = f"unknown command {self.extra_args[0]!r}" if self.extra_args else "no command"
            raise InvalidInputError(f"{given} (one of: {known})")
        return self.subapp.start()


def command_first(argv: list[str]) -> list[str]:
    """``--store X list`` -> ``list --store X``: options given before the command name apply to
    it (traitlets only dispatches on a command name in first place)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in VALUE_OPTIONS else 1
    if i < len(argv) and argv[i] in GkeResumeCLI.subcommands:
        return [argv[i], *argv[:i], *argv[i + 1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``jupyter-gkeresume`` (and so ``jupyter gkeresume``). Exit codes: 0
    success, 1 a verification or operation failed, 2 bad usage or input."""
    app = GkeResumeCLI()
    try:
        app.initialize(argv)
        return app.start()
    except SystemExit as exc:  # --help, --version (0); bad options (traitlets exits 1)
        return 0 if not exc.code else 2
    except InvalidInputError as exc:
        print(f"jupyter gkeresume: error: {printable(exc)}", file=sys.stderr)
        return 2
    except GkeResumeError as exc:
        print(f"jupyter gkeresume: error: {printable(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
