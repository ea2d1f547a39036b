"""Prometheus metrics (served on jupyter_server's ``/metrics``) and the structured log lines.

Metrics live in prometheus_client's default registry, which jupyter_server exposes; they are
created once per process (importing this module twice is harmless: Python caches modules).
``log_event`` writes one JSON line per pause and resume so log pipelines can parse it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from prometheus_client import Counter, Histogram

from .printable import printable

BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600)

PAUSE_SECONDS = Histogram(
    "gkeresume_pause_seconds", "Seconds spent pausing, by phase (checkpoint, verify, release, "
    "total).", ["phase"], buckets=BUCKETS,
)
SNAPSHOT_BYTES = Counter(
    "gkeresume_snapshot_bytes", "Snapshot bytes by kind: new (written) or reused (already "
    "stored).", ["kind"],
)
RESUME_SECONDS = Histogram(
    "gkeresume_resume_seconds", "Seconds from a resume request to every kernel ready.",
    buckets=BUCKETS,
)
FAILURES = Counter(
    "gkeresume_failures", "Failed operations by operation and reason (error class).",
    ["operation", "reason"],
)
OPERATIONS = Counter(
    "gkeresume_operations", "Finished operations by outcome.", ["operation", "outcome"],
)
ACCELERATOR_SECONDS_RELEASED = Counter(
    "gkeresume_accelerator_seconds_released",
    "Accelerator-seconds given back: seconds paused x GPUs, counted when the workspace resumes.",
)


def log_event(log: logging.Logger | logging.LoggerAdapter, event: str, **fields: Any) -> None:
    """One structured line: ``gkeresume {"event": ..., ...}`` (never credentials)."""
    log.info("gkeresume %s", json.dumps({"event": event, **fields}, sort_keys=True, default=str))


def record_failure(log: logging.Logger | logging.LoggerAdapter, operation: str, exc: BaseException,
                   message: str) -> None:
    """Count and log a failed operation (``message`` says what failed and what was kept)."""
    FAILURES.labels(operation, type(exc).__name__).inc()
    OPERATIONS.labels(operation, "failed").inc()
    log_event(log, operation, outcome="failed", error=type(exc).__name__, message=message)
    log.error("gkeresume: %s", printable(message))
