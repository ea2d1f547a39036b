"""Workspace ids are an injective function of the identity (issue 13.1): two users never share one.

The identities below collided under the old slug (every one of these pairs mapped to one id), so
two users listed, deleted and overwrote each other's snapshots.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.workspace import resolve_workspace_id, validate_workspace_id, workspace_id_for


def hub(user, server=""):
    return {"JUPYTERHUB_USER": user, "JUPYTERHUB_SERVER_NAME": server}


def kubeflow(namespace, name):
    return {"NB_PREFIX": f"/notebook/{namespace}/{name}"}


def workspace_v2(namespace, name, port="jupyterlab"):
    """Kubeflow Notebooks v2's prefix (kubeflow/notebooks ``notebooks-v2``
    ``workspaces/controller/internal/controller/workspace_controller.go``:
    ``workspaceConnectPathTemplate = "/workspace/connect/%s/%s/%s/"``)."""
    return {"NB_PREFIX": f"/workspace/connect/{namespace}/{name}/{port}/"}


COLLIDED = [
    (hub("日本"), hub("中文")),
    (hub("bob", "x"), hub("bob-x")),
    (hub("alice@corp.com"), hub("alice-corp.com")),
    (hub("Alice"), hub("alice")),
    (hub("a" * 130), hub("a" * 131)),
    (hub("x" * 200 + "1"), hub("x" * 200 + "2")),
    (kubeflow("team-a", "nb"), kubeflow("team", "a-nb")),
    (hub("team-a", "nb"), kubeflow("team-a", "nb")),
    (workspace_v2("team", "one"), workspace_v2("team", "two")),  # were both local-{login}
    (workspace_v2("team-a", "nb"), workspace_v2("team", "a-nb")),
    (workspace_v2("team", "nb"), kubeflow("team", "nb")),  # a Workspace is not a Notebook
]


@pytest.mark.parametrize(("one", "other"), COLLIDED)
def test_identities_that_collided_get_distinct_valid_ids(one, other):
    a, b = resolve_workspace_id(env=one), resolve_workspace_id(env=other)
    assert a != b
    assert validate_workspace_id(a) == a and validate_workspace_id(b) == b


def test_plain_names_keep_their_readable_id_and_ids_are_stable():
    assert resolve_workspace_id(env=hub("alice")) == "hub-alice"
    assert resolve_workspace_id(env=hub("alice", "gpu1")) == "hub-alice-gpu1"
    assert resolve_workspace_id(env=kubeflow("team", "trainer")) == "kf-team-trainer"
    assert resolve_workspace_id(env=workspace_v2("team", "trainer")) == "kfws-team-trainer"
    # the port is how the Workspace is reached, not which one it is
    assert resolve_workspace_id(env=workspace_v2("team", "trainer", "vscode")) == "kfws-team-trainer"
    # anything else: a readable prefix, then '.', then a digest of the exact identity
    wid = resolve_workspace_id(env=hub("ana@example.org", "gpu"))
    assert wid.startswith("hub-ana-example-org-gpu.") and len(wid.split(".")[-1]) == 32
    assert wid == resolve_workspace_id(env={**hub("ana@example.org", "gpu"), "HOSTNAME": "pod-2"})


def test_explicit_ids_stay_as_given():
    assert resolve_workspace_id("hub-bob-x", env=hub("bob", "x")) == "hub-bob-x"
    assert resolve_workspace_id(env={"GKERESUME_WORKSPACE": "kf-team-a-nb", **kubeflow("a", "b")}) \
        == "kf-team-a-nb"


identity_fields = st.text(max_size=40) | st.sampled_from(["", "a", "a-b", "b", "x" * 140, "日本"])
identities = st.tuples(st.sampled_from(["hub", "kf", "local"]), identity_fields, identity_fields)


@settings(max_examples=500, deadline=None)
@given(st.lists(identities, min_size=2, max_size=6, unique=True))
def test_distinct_identities_give_distinct_valid_ids(many):
    ids = [workspace_id_for(kind, *fields) for kind, *fields in many]
    assert len(set(ids)) == len(many)
    for wid in ids:
        assert validate_workspace_id(wid) == wid


@pytest.mark.parametrize("bad", ["ok\n", "../x", "a..b", "A", "", "x" * 129, "-a"])
def test_bad_explicit_ids_are_refused(bad):
    with pytest.raises(InvalidInputError):
        validate_workspace_id(bad)
