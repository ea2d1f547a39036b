"""Format v2 (BLAKE3 blob names) beside v1 (sha256): a v1 snapshot written by the previous code
(``tests/data/v1_store``, made by main before v2 with the kernel_env signing key) still lists,
verifies and restores in a real kernel; new snapshots are v2; gc of the mixed workspace keeps
both kinds; a resume seeds the skip-cache so the next checkpoint reuses what it read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jupyter_gkeresume.errors import ManifestError
from jupyter_gkeresume.snapshot import Manifest, SigningKey, SnapshotStore
from jupyter_gkeresume.snapshot.digests import BLAKE3, SHA256, algorithm_of
from jupyter_gkeresume.snapshot.format import FORMAT_VERSION
from jupyter_gkeresume.snapshot.gc import collect_garbage
from jupyter_gkeresume.snapshot.verify import verify_snapshot

V1_STORE = Path(__file__).parent / "data" / "v1_store"
V1_ID = "20261201T102044Z-15d303"


def v1_manifest_data() -> dict:
    return json.loads((V1_STORE / "test-ws" / "snapshots" / f"{V1_ID}.json").read_bytes())


def test_the_v1_fixture_parses_as_v1_with_sha256_blobs():
    manifest = Manifest.from_dict(v1_manifest_data())
    assert manifest.format_version == 1 and FORMAT_VERSION == 2
    assert {algorithm_of(d) for d in manifest.blobs} == {SHA256}


def test_a_v1_manifest_may_not_name_blake3_blobs():
    data = v1_manifest_data()
    old = data["graph_blob"]
    new = "b3-" + old
    data["blobs"][new] = data["blobs"].pop(old)
    data["graph_blob"] = new
    with pytest.raises(ManifestError, match="blake3 digest, not allowed in format_version 1"):
        Manifest.from_dict(data)
    data["format_version"] = 2  # v2 names blobs by any known algorithm
    assert Manifest.from_dict(data).graph_blob == new


@pytest.mark.parametrize("version", [0, 3, 99])
def test_unknown_format_versions_are_refused_by_name(version):
    data = v1_manifest_data()
    data["format_version"] = version
    with pytest.raises(ManifestError, match=f"format_version {version} is not supported"):
        Manifest.from_dict(data)


CHECK = r'''
import json, numpy as np, torch
print(json.dumps({
    "weights": bool(torch.equal(weights, torch.arange(1024, dtype=torch.float32).reshape(32, 32))),
    "big": bool((big == np.arange(20000, dtype=np.int32)).all()),
    "alias": alias is big,
    "config": config,
}))
'''


def test_v1_snapshot_restores_verifies_and_mixes_with_v2(kernel_env, start_kernel):
    root = Path(kernel_env["GKERESUME_STORE"])
    shutil.copytree(V1_STORE, root, dirs_exist_ok=True)
    store = SnapshotStore(str(root), "test-ws")
    key = SigningKey(kernel_env["GKERESUME_SIGNING_KEY"].encode())
    assert verify_snapshot(store, V1_ID, key).ok

    kernel = start_kernel()
    listed = kernel.run_json("import json, kernel_hooks\n"
                             "print(json.dumps([r.to_dict() for r in kernel_hooks.list_snapshots()]))")
    assert [row["id"] for row in listed] == [V1_ID]
    kernel.run("%resume v1-fixture")
    assert kernel.run_json(CHECK) == {"weights": True, "big": True, "alias": True,
                                      "config": {"lr": 0.01, "name": "v1"}}

    first = kernel.run_json("r = kernel_hooks.checkpoint('v2-a'); print(json.dumps(r.to_dict()))")
    v2 = Manifest.from_json(store.read_manifest_bytes(first["snapshot_id"]))
    assert v2.format_version == 2
    assert {algorithm_of(d) for d in v2.blobs} == {BLAKE3}  # new snapshots name blobs by BLAKE3
    again = kernel.run_json("r = kernel_hooks.checkpoint('v2-b'); print(json.dumps(r.to_dict()))")
    storage_blobs = {ref.blob for ref in v2.storages.values()}
    assert again["bytes_reused"] >= sum(v2.blobs[d] for d in storage_blobs)

    report = collect_garbage(store, grace_seconds=0)
    assert report.swept == {}
    kinds = {algorithm_of(b.digest) for b in store.list_blobs()}
    assert kinds == {SHA256, BLAKE3}
    for snapshot_id in store.list_snapshot_ids():
        assert verify_snapshot(store, snapshot_id, key).ok, snapshot_id

    # a fresh kernel restores the v2 snapshot; its first checkpoint reuses every storage blob
    kernel.kill()
    fresh = start_kernel()
    fresh.run("%resume v2-a")
    assert fresh.run_json(CHECK)["weights"] is True
    after = fresh.run_json("import json, kernel_hooks\n"
                           "r = kernel_hooks.checkpoint('v2-c'); print(json.dumps(r.to_dict()))")
    v2c = Manifest.from_json(store.read_manifest_bytes(after["snapshot_id"]))
    assert {ref.blob for ref in v2c.storages.values()} == storage_blobs
    assert after["bytes_reused"] >= sum(v2.blobs[d] for d in storage_blobs)

    # v1 blobs go once the v1 snapshot is deleted; the v2 ones stay
    store.delete_manifest(V1_ID)
    swept = collect_garbage(store, grace_seconds=0).swept
    assert swept and {algorithm_of(d) for d in swept} == {SHA256}
    assert all(verify_snapshot(store, i, key).ok for i in store.list_snapshot_ids())
