"""Estimated monthly storage cost of snapshots: stored bytes times a price per GiB-month.

The default price is the GCS Standard storage list price for a region such as us-central1,
$0.020 per GB-month, where Google bills a "GB" as 2**30 bytes. It is configurable (the
``GKERESUME_PRICE_PER_GIB_MONTH``) for other regions,
classes (Nearline, Coldline, multi-region) or negotiated prices. Estimates only: operations,
egress, early-deletion fees and the minimum storage duration of colder classes are not counted.

Blobs are shared between snapshots, so two figures answer two questions:
- a snapshot's bytes (every blob it references, ``SnapshotSummary.monthly_cost_usd``) is its cost
  were it stored alone;
- the workspace's bytes (``workspace_cost``) count each stored blob once: what the bucket bills.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidInputError
from .store import SnapshotStore

DEFAULT_PRICE_PER_GIB_MONTH = 0.020
GIB = 1 << 30


def resolve_price(explicit: float | None = None, env: Mapping[str, str] | None = None) -> float:
    """$ per GiB-month: ``explicit``, else ``GKERESUME_PRICE_PER_GIB_MONTH``, else the default."""
    env = os.environ if env is None else env
    value: object = explicit
    if value is None:
        value = env.get("GKERESUME_PRICE_PER_GIB_MONTH") or DEFAULT_PRICE_PER_GIB_MONTH
    try:
        price = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        price = math.nan
    if not (math.isfinite(price) and price >= 0):
        raise InvalidInputError(
            f"price per GB-month (GKERESUME_PRICE_PER_GIB_MONTH) must be a number >= 0: {value!r}"
        )
    return price


def monthly_cost(nbytes: int, price_per_gib_month: float | None = None) -> float:
    """Dollars per month to keep ``nbytes`` stored."""
    return nbytes / GIB * resolve_price(price_per_gib_month)


def format_cost(dollars: float) -> str:
    """``$1.23/month``; amounts below a cent show as ``<$0.01/month``."""
    if 0 < dollars < 0.005:
        return "<$0.01/month"
    return f"${dollars:,.2f}/month"


@dataclass(frozen=True)
class WorkspaceCost:
    """What a workspace's store holds and costs: every blob once, orphans of aborted pauses
    included (what the bucket bills until gc frees them)."""

    snapshots: int
    bytes: int
    monthly_usd: float

    def to_dict(self) -> dict[str, float | int]:
        return {"snapshots": self.snapshots, "bytes": self.bytes, "monthly_usd": self.monthly_usd}


def workspace_cost(store: SnapshotStore, price_per_gib_month: float | None = None) -> WorkspaceCost:
    """List the store once and price what it holds."""
    stored = sum(blob.size for blob in store.list_blobs())
    return WorkspaceCost(
        len(store.list_snapshot_ids()), stored, monthly_cost(stored, price_per_gib_month)
    )
