"""The jupyter_server extension: configuration (``c.GkeResume.*``), routes, lifecycle hooks.

Lifecycle: ``GkeResumeApp.initialize_settings`` builds the ``GkeResume`` configuration, the
release backend and the ``Orchestrator`` (nothing touches the store yet);
``_start_jupyter_server_extension`` (event loop running) reads the paused record, auto-resumes
if configured and starts the idle watcher and the activity sampler (advisor events); handlers
also call ``ensure_started`` so an embedded server (tests) behaves the same; ``stop_extension``
(SIGTERM, culler, preemption) checkpoints every kernel within ``shutdown_checkpoint_timeout``
before jupyter_server stops the kernels.
"""

from __future__ import annotations

import asyncio
import math
import os

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Enum, Float, Integer, List, TraitError, Type, Unicode, Union, validate
from traitlets.config import LoggingConfigurable

from .doctor import DoctorInputs
from .errors import GkeResumeError, InvalidInputError
from .events import ActivitySampler
from .handlers import handlers
from .idle import IdleWatcher
from .kernels import guard_kernel_starts, seed_session_kernels
from .orchestrator import Orchestrator
from .release import BACKENDS, ReleaseBackend, autodetect
from .snapshot.gc import DEFAULT_GRACE_SECONDS
from .snapshot.retention import RetentionPolicy
from .snapshot.signing import key_warnings
from .snapshot.writer import VERIFY_MODES
from .workspace import resolve_store_url, resolve_workspace_id

SHUTDOWN_BUDGET_ENV = "GKERESUME_SHUTDOWN_BUDGET"
IDLE_TIMEOUT_ENV = "GKERESUME_IDLE_TIMEOUT"


def seconds_from_env(variable: str, configured: float, advice: str, *,
                     integer: bool = False) -> float:
    """``$variable`` as a number of seconds (>= 0; whole when ``integer``) when it is set, else
    ``configured``; any other value raises ``InvalidInputError`` naming the variable and what
    to set it to (``advice``)."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return configured
    try:
        seconds = float(int(raw)) if integer else float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        whole = "whole " if integer else ""
        raise InvalidInputError(f"{variable}={raw!r} is not a number of {whole}seconds: set it "
                                f"to {advice}")
    return seconds


class GkeResume(LoggingConfigurable):
    """Settings of jupyter-gkeresume (``c.GkeResume.<name>`` in any jupyter_server config)."""

    store_url = Unicode(
        "", help="Where snapshots go: any fsspec URL (gs://bucket/prefix) or a local directory. "
        "Empty: $GKERESUME_STORE, else {jupyter data dir}/gkeresume/store."
    ).tag(config=True)
    workspace_id = Unicode(
        "", help="The workspace id snapshots are stored under. Empty: $GKERESUME_WORKSPACE, the "
        "JupyterHub user (and server name), the Kubeflow Notebook or Workspace, else local-{user}."
    ).tag(config=True)
    release_backend = Union(
        [Enum(["auto", *BACKENDS]), Type(klass=ReleaseBackend)], default_value="auto",
        help="How a pause gives the pod back: auto (detect: platform.py), none, jupyterhub, "
        "kubeflow-notebook (Notebooks v1), kubeflow-workspace (Notebooks v2), or a "
        "ReleaseBackend subclass (class or import string).",
    ).tag(config=True)
    idle_timeout = Float(
        0.0, help="Pause (with release) after this many seconds in which no person did "
        "anything (cells run, terminal traffic, files saved; never a client's polls: "
        "idle.ACTIVITY_KINDS); 0 = never. Keep it below every culler's timeout. "
        f"${IDLE_TIMEOUT_ENV}, when set, overrides it."
    ).tag(config=True)
    idle_pause_busy = Bool(
        False, help="Let an idle pause checkpoint a kernel that is busy running a cell (the "
        "checkpoint waits for the cell)."
    ).tag(config=True)
    shutdown_checkpoint_timeout = Float(
        25.0, help="On server stop (SIGTERM), seconds allowed to checkpoint every kernel; 0 = "
        "do not. Keep it below the pod's terminationGracePeriodSeconds (default 30; a spot "
        f"node gives about 15). ${SHUTDOWN_BUDGET_ENV}, when set, overrides it (per profile)."
    ).tag(config=True)
    checkpoint_on_shutdown = Bool(
        True, help="Default of the runtime setting (PUT /gkeresume/api/settings, stored in the "
        "store's records/settings.json, which wins once set): checkpoint on server stop."
    ).tag(config=True)
    auto_resume = Bool(
        False, help="Resume a paused workspace as soon as the server starts, without a click."
    ).tag(config=True)
    carry_packages = Bool(
        True, help="Store the packages installed in a kernel's session (outside the home "
        "volume) with its snapshots and install them again at resume, before anything is "
        "unpickled. Passed to kernels as GKERESUME_PACKAGES."
    ).tag(config=True)
    extra_paths = List(
        Unicode(), help="Directories outside the home volume (absolute paths) whose files are "
        "stored with every snapshot (content-addressed: unchanged files are not stored twice) "
        "and put back at resume, before anything is unpickled. Passed to kernels as "
        "GKERESUME_EXTRA_PATHS; a resume writes only into directories named here."
    ).tag(config=True)
    extra_paths_max_bytes = Integer(
        1 << 30, min=0, help="The most bytes of files extra_paths may add to one snapshot: a directory "
        "that would go over is not stored and is named in the pause report. Passed to kernels "
        "as GKERESUME_EXTRA_PATHS_MAX_BYTES."
    ).tag(config=True)

    @validate("extra_paths")
    def _absolute_paths(self, proposal: dict) -> list[str]:
        relative = [p for p in proposal["value"] if not os.path.isabs(p) or os.pathsep in p]
        if relative:
            raise TraitError(f"GkeResume.extra_paths: not an absolute directory: "
                             f"{', '.join(map(repr, relative))}")
        return [os.path.normpath(p) for p in proposal["value"]]

    verify = Enum(
        list(VERIFY_MODES), default_value="metadata",
        help="How a pause checks each snapshot before it releases anything: metadata (the "
        "signed manifest read back, every blob present with its size; no second read) or full "
        "(also every blob read back against its digest). The shutdown checkpoint always uses "
        "metadata. See docs/server.md.",
    ).tag(config=True)
    keep_last = Integer(
        0, help="After every pause and checkpoint the server runs, keep this many newest "
        "snapshots of each notebook (named snapshots and the paused record's always stay); "
        "0 = no such rule."
    ).tag(config=True)
    keep_days = Float(
        0.0, help="After every pause and checkpoint the server runs, keep snapshots younger "
        "than this many days (with keep_last: either rule keeps); 0 = no such rule."
    ).tag(config=True)
    gc_grace_hours = Float(
        DEFAULT_GRACE_SECONDS / 3600, help="After automatic retention, gc frees unreferenced "
        "blobs older than this (it must exceed the longest checkpoint)."
    ).tag(config=True)
    lab_save_timeout = Float(
        5.0, min=0, help="Before every pause, seconds the connected labs get to save their "
        "open documents; a lab that has not answered by then does not hold the pause up (the "
        "pause's result says so)."
    ).tag(config=True)
    kernel_call_timeout = Float(
        3600.0, help="Seconds one kernel may take to checkpoint or restore."
    ).tag(config=True)

    def retention_policy(self) -> RetentionPolicy:
        """The automatic retention policy (inactive when both rules are 0)."""
        return RetentionPolicy(keep_last=self.keep_last or None, keep_days=self.keep_days or None)

    def resolved_store_url(self) -> str:
        return resolve_store_url(self.store_url or None)

    def resolved_workspace_id(self) -> str:
        return resolve_workspace_id(self.workspace_id or None)

    def resolved_shutdown_budget(self) -> float:
        """``$GKERESUME_SHUTDOWN_BUDGET`` (seconds) when set, else ``shutdown_checkpoint_timeout``:
        the environment wins, so that one image's config serves profiles whose pods get
        different grace periods (each profile sets the variable)."""
        return seconds_from_env(
            SHUTDOWN_BUDGET_ENV, self.shutdown_checkpoint_timeout,
            "the shutdown checkpoint's budget, below the pod's grace period (e.g. 12 on spot "
            "nodes; 0 turns the checkpoint off), or unset it to use "
            "c.GkeResume.shutdown_checkpoint_timeout")

    def resolved_idle_timeout(self) -> float:
        """``$GKERESUME_IDLE_TIMEOUT`` (whole seconds) when set, else ``idle_timeout``: the
        environment wins, as for the budget, so that a platform's manifest (PodDefault,
        WorkspaceKind, z2jh values) gives every pod an idle pause without a config file."""
        return seconds_from_env(
            IDLE_TIMEOUT_ENV, self.idle_timeout,
            "the idle pause's timeout in whole seconds, below every culler's (e.g. 1800; 0 "
            "turns the idle pause off), or unset it to use c.GkeResume.idle_timeout",
            integer=True)

    def backend_class(self) -> type[ReleaseBackend]:
        if isinstance(self.release_backend, str):
            return autodetect() if self.release_backend == "auto" else BACKENDS[
                self.release_backend]
        return self.release_backend


class GkeResumeApp(ExtensionApp):
    """The server extension ``jupyter_gkeresume`` (enabled on install)."""

    name = "jupyter_gkeresume"
    load_other_extensions = True

    def initialize_settings(self) -> None:
        config = GkeResume(parent=self)
        configured_workspace = config.workspace_id  # the doctor says where the id came from
        config.store_url = config.resolved_store_url()
        config.workspace_id = config.resolved_workspace_id()
        config.shutdown_checkpoint_timeout = config.resolved_shutdown_budget()
        config.idle_timeout = config.resolved_idle_timeout()
        backend = config.backend_class()(parent=self)
        self.gkeresume = config
        self.orchestrator = Orchestrator(
            settings=config, kernel_manager=self.serverapp.kernel_manager,
            session_manager=self.serverapp.session_manager, backend=backend, log=self.log,
            terminals=self._open_terminals,
        )
        self.idle_watcher: IdleWatcher | None = None
        self.activity_sampler: ActivitySampler | None = None
        self.key_check: asyncio.Task | None = None
        self.settings["gkeresume_orchestrator"] = self.orchestrator
        self.settings["gkeresume_doctor"] = DoctorInputs(  # GET /gkeresume/api/doctor
            workspace_id=configured_workspace, store_url=config.store_url, backend=backend,
            release_backend_setting=config.release_backend
            if isinstance(config.release_backend, str) else "configured",
            base_url=self.serverapp.base_url,
            shutdown_budget=config.shutdown_checkpoint_timeout,
            idle_timeout=config.idle_timeout, idle_pause_busy=config.idle_pause_busy,
        )
        # the idle clock: what a person does, never jupyter_server's last_activity() (moved by
        # every request of any client, polls included)
        self.orchestrator.activity.watch_server(self.serverapp)
        # the kernels resolve the same store and workspace as this server (%checkpoint, %resume)
        guard_kernel_starts(self.serverapp.kernel_manager, self.orchestrator.refuse_kernel_start,
                            {"GKERESUME_STORE": config.store_url,  # what workspace.resolve_* read
                             "GKERESUME_WORKSPACE": config.workspace_id,
                             # notebook paths relative to the root, as the lab shows them
                             "GKERESUME_ROOT_DIR": os.path.abspath(self.serverapp.root_dir),
                             "GKERESUME_PACKAGES": "1" if config.carry_packages else "0",
                             "GKERESUME_EXTRA_PATHS": os.pathsep.join(config.extra_paths),
                             "GKERESUME_EXTRA_PATHS_MAX_BYTES": str(config.extra_paths_max_bytes)},
                            self.orchestrator.kernel_started)
        seed_session_kernels(self.serverapp.session_manager, self.orchestrator.gateway.seeds)
        # one kernel per notebook, whether the lab or a resume asks first
        self.orchestrator.gateway.notebook_kernels.install()
        self.log.info("gkeresume: workspace %s, store %s, release %s (pid %d)",
                      config.workspace_id, self.orchestrator.store, backend.name, os.getpid())

    def _open_terminals(self) -> list[str]:
        """Names of the server's open terminals (jupyter_server_terminals puts its
        ``TerminalManager`` in the web app's settings as ``terminal_manager``)."""
        manager = self.serverapp.web_app.settings.get("terminal_manager")
        return [model["name"] for model in manager.list()] if manager is not None else []

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers())

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        # Kernels inherit it: ``%pause`` finds this server's REST API there.
        os.environ["GKERESUME_SERVER_URL"] = serverapp.connection_url
        await self.orchestrator.ensure_started()
        self.key_check = asyncio.create_task(self._log_key_warnings())
        activity = self.orchestrator.activity
        self.activity_sampler = ActivitySampler(self.orchestrator.state, self.orchestrator.events,
                                               activity.last)
        self.activity_sampler.start()
        if self.gkeresume.idle_timeout > 0:
            self.idle_watcher = IdleWatcher(
                self.orchestrator, activity.last,
                timeout=self.gkeresume.idle_timeout, pause_busy=self.gkeresume.idle_pause_busy,
                log=self.log,
            )
            self.idle_watcher.start()

    async def _log_key_warnings(self) -> None:
        """A shared or changed signing key, said in the log once at startup (docs/security.md):
        a few store reads, in a task so that they never delay the server's start."""
        try:
            key = self.orchestrator.key
            warnings = await asyncio.to_thread(key_warnings, self.orchestrator.store, key)
        except GkeResumeError as exc:  # e.g. GKERESUME_SIGNING_KEY_FILE names a missing file
            warnings = [str(exc)]
        for warning in warnings:
            self.log.warning("gkeresume: %s", warning)

    async def stop_extension(self) -> None:
        if self.key_check:
            self.key_check.cancel()
        if self.idle_watcher:
            self.idle_watcher.stop()
        if self.activity_sampler:
            self.activity_sampler.stop()
        timeout = self.gkeresume.shutdown_checkpoint_timeout
        if timeout > 0:
            await self.orchestrator.shutdown(timeout)
        self.orchestrator.gateway.close()
