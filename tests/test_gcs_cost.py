"""Estimated storage cost: the price setting, per-snapshot figures, the workspace total on gs://."""

from __future__ import annotations

import pytest
from test_gcs_store import make_blob

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot.catalog import SnapshotSummary
from jupyter_gkeresume.snapshot.cost import (
    DEFAULT_PRICE_PER_GIB_MONTH,
    GIB,
    format_cost,
    monthly_cost,
    resolve_price,
    workspace_cost,
)
from jupyter_gkeresume.snapshot.store import SnapshotStore


def test_price_resolution():
    assert resolve_price(env={}) == DEFAULT_PRICE_PER_GIB_MONTH == 0.020
    assert resolve_price(env={"GKERESUME_PRICE_PER_GIB_MONTH": "0.004"}) == 0.004
    assert resolve_price(0.01, env={"GKERESUME_PRICE_PER_GIB_MONTH": "0.004"}) == 0.01
    for bad in ("-1", "cheap", "nan", "inf"):
        with pytest.raises(InvalidInputError, match="GKERESUME_PRICE_PER_GIB_MONTH"):
            resolve_price(env={"GKERESUME_PRICE_PER_GIB_MONTH": bad})


def test_costs_and_their_display(monkeypatch):
    monkeypatch.delenv("GKERESUME_PRICE_PER_GIB_MONTH", raising=False)
    assert monthly_cost(50 * GIB) == pytest.approx(1.0)
    assert monthly_cost(GIB, 0.026) == pytest.approx(0.026)
    assert format_cost(1.0) == "$1.00/month"
    assert format_cost(0.001) == "<$0.01/month"
    assert format_cost(0) == "$0.00/month"
    row = SnapshotSummary("20260101T000000Z-abcdef", bytes=10 * GIB)
    assert row.monthly_cost_usd == pytest.approx(0.2)
    assert row.to_dict()["monthly_cost_usd"] == pytest.approx(0.2)
    monkeypatch.setenv("GKERESUME_PRICE_PER_GIB_MONTH", "0.1")
    assert row.to_dict()["monthly_cost_usd"] == pytest.approx(1.0)


def test_workspace_cost_counts_each_stored_blob_once(gcs_bucket, monkeypatch):
    monkeypatch.delenv("GKERESUME_PRICE_PER_GIB_MONTH", raising=False)
    store = SnapshotStore(gcs_bucket.url, "ws", gcs_bucket.storage_options)
    assert workspace_cost(store).to_dict() == {"snapshots": 0, "bytes": 0, "monthly_usd": 0.0}
    sizes = []
    for n in (1000, 20000):
        digest, parts, size = make_blob(n)
        store.write_blob(digest, parts)
        store.write_blob(digest, parts)  # shared by two snapshots: stored once
        sizes.append(size)
    store.commit_manifest("20260101T000000Z-abcdef", b"{}")
    store.commit_manifest("20260101T000001Z-abcdef", b"{}")
    cost = workspace_cost(store, 1.0)
    assert (cost.snapshots, cost.bytes) == (2, sum(sizes))
    assert cost.monthly_usd == pytest.approx(sum(sizes) / GIB)
