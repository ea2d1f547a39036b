"""Each notebook resumes its own state: ``%resume`` without an id takes the newest snapshot of
this notebook, ``--any`` or an id takes another's; notebook paths read one way everywhere."""

from __future__ import annotations

import pytest
from fixtures_kernels import KernelError

from jupyter_gkeresume.snapshot import Manifest, SnapshotStore
from kernel_hooks.notebooks import notebook_path, shorten, this_notebook


def notebook_env(root, path: str) -> dict[str, str]:
    """What jupyter_server and the server extension give a kernel of notebook ``path``."""
    return {"JPY_SESSION_NAME": str(root / path), "GKERESUME_ROOT_DIR": str(root)}


def test_resume_takes_this_notebooks_snapshot_not_the_newest(start_kernel, kernel_env, tmp_path):
    root = tmp_path / "home"
    (root / "sub").mkdir(parents=True)
    a = start_kernel(notebook_env(root, "sub/a.ipynb"))
    a.run("who = 'a'\n%checkpoint")
    b = start_kernel(notebook_env(root, "b.ipynb"))
    b.run("who = 'b'\n%checkpoint")  # newer than a's
    store = SnapshotStore(kernel_env["GKERESUME_STORE"], kernel_env["GKERESUME_WORKSPACE"])
    ids = store.list_snapshot_ids()
    notebooks = [Manifest.from_json(store.read_manifest_bytes(i)).notebook for i in ids]
    assert notebooks == ["sub/a.ipynb", "b.ipynb"], "stored relative to the server root"

    fresh_a = start_kernel(notebook_env(root, "sub/a.ipynb"))
    out = fresh_a.run("%resume")
    assert f"resumed {ids[0]}" in out
    assert fresh_a.run("print(who)") == "a\n"
    listing = fresh_a.run("%snapshots").splitlines()
    rows = {i: line for line in listing for i in ids if f" {i} " in line}
    assert rows[ids[0]].startswith("* ") and "sub/a.ipynb" in rows[ids[0]]
    assert rows[ids[1]].startswith("  ") and "b.ipynb" in rows[ids[1]]
    assert "* = this notebook (sub/a.ipynb)" in listing

    other = start_kernel(notebook_env(root, "sub/a.ipynb"))
    assert f"resumed {ids[1]}" in other.run("%resume latest --any")
    assert other.run("print(who)") == "b\n"
    by_id = start_kernel(notebook_env(root, "sub/a.ipynb"))
    with pytest.raises(KernelError, match=rf"{ids[1]} was taken in b.ipynb, not in sub/a.ipynb"):
        by_id.run(f"%resume {ids[1]}")  # issue 22.1: one notebook's state never lands in another
    assert by_id.run("print('who' in globals())") == "False\n"
    by_id.run(f"%resume {ids[1]} --any")  # unless asked explicitly
    assert by_id.run("print(who)") == "b\n"

    new = start_kernel(notebook_env(root, "c.ipynb"))
    with pytest.raises(KernelError, match=r"UsageError: no snapshot of c.ipynb .*"
                                          rf"newest of another notebook is {ids[1]} \(b.ipynb\)"):
        new.run("%resume")
    assert new.run("print('who' in globals())") == "False\n"


def test_a_key_file_needs_an_explicit_id(start_kernel):
    k = start_kernel()
    k.run("x = 1\n%checkpoint -n named")
    for line in ("%resume --key-file old.key", "%resume latest --key-file old.key",
                 "%resume named --key-file old.key"):
        with pytest.raises(KernelError, match="UsageError: a key file verifies one snapshot named "
                                              "by its id"):
            k.run(line)
    with pytest.raises(KernelError, match="a key file verifies one snapshot"):
        k.run("import kernel_hooks\nkernel_hooks.resume(key_file='old.key')")


def test_the_magics_help_comes_from_one_declaration(start_kernel):
    k = start_kernel()
    help_text = k.run("%resume --help")
    for option in ("--any", "--only a,b", "--key-file OLD", "--replay", "ID|NAME|latest"):
        assert option in help_text
    assert "newest snapshot of this notebook" in help_text


@pytest.mark.parametrize(("path", "env", "expected"), [
    ("/srv/home/sub/a.ipynb", {"GKERESUME_ROOT_DIR": "/srv/home"}, "sub/a.ipynb"),
    ("/srv/home/sub/a.ipynb", {"GKERESUME_ROOT_DIR": "/srv/home/"}, "sub/a.ipynb"),
    ("/elsewhere/a.ipynb", {"GKERESUME_ROOT_DIR": "/srv/home"}, "/elsewhere/a.ipynb"),
    ("/srv/homework/a.ipynb", {"GKERESUME_ROOT_DIR": "/srv/home"}, "/srv/homework/a.ipynb"),
    ("sub/./a.ipynb", {}, "sub/a.ipynb"),
    ("Untitled.ipynb", {"GKERESUME_ROOT_DIR": "/srv/home"}, "Untitled.ipynb"),
    (None, {}, None),
])
def test_notebook_paths_read_one_way(path, env, expected):
    assert notebook_path(path, env) == expected


def test_this_notebook_prefers_what_the_caller_passes():
    env = {"JPY_SESSION_NAME": "/srv/home/a.ipynb", "GKERESUME_ROOT_DIR": "/srv/home"}
    assert this_notebook(None, env) == "a.ipynb"
    assert this_notebook("sub/b.ipynb", env) == "sub/b.ipynb"
    assert this_notebook(None, {}) is None


def test_long_paths_are_cut_from_the_left_behind_an_ellipsis():
    assert shorten("a.ipynb", 24) == "a.ipynb"
    assert shorten("omer/repo/experiments/long/Untitled.ipynb", 24) == "…nts/long/Untitled.ipynb"
    assert len(shorten("x" * 100, 24)) == 24
