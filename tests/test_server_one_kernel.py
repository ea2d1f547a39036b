"""Issue 27.3 and 27.5 against a real in-process jupyter_server with real kernels: one kernel per
notebook, whoever asks for it first, and the lab's kernel of a paused notebook starts with the
snapshot's string hash seed.

JupyterLab asks for a notebook's session with a UUID path in the notebook's directory and the
file's name, then renames the session to the notebook's path (``@jupyterlab/apputils``
``sessioncontext.tsx``, ``SessionContext._changeKernel``: "Use a UUID for the path to overcome a
race condition on the server"); jupyter_server reuses a session only for the exact path it is
given (``services/sessions/handlers.py`` ``SessionsHandler.post``: ``session_exists(path)``) and
reads the session's file as ``name`` in the directory of ``path``
(``services/sessions/sessionmanager.py`` ``get_kernel_env``). ``Api.lab_session`` asks exactly so.
The lab's request arrives before the resume, while the resume starts the notebook's kernel
(held there), while the kernel restores (held inside the restore by an object whose unpickling
waits for a file), or after it: each time the lab gets the kernel that holds the state, a cell
sent while it restores runs after the restore, and the next pause and resume take each notebook
once.
"""

from __future__ import annotations

import asyncio
import collections

import pytest
from fixtures_server import reply_to, server_config

from jupyter_gkeresume.kernel_client import own_client
from jupyter_gkeresume.notebook_sessions import session_notebook

NOTEBOOKS = ("a.ipynb", "b.ipynb")
GATE = """
import os, time
class Gate:
    '''Unpickling waits until the file ``flag`` exists: the restore is held there.'''
    def __init__(self, flag):
        self.flag = flag
    def __setstate__(self, state):
        self.__dict__.update(state)
        while not os.path.exists(self.flag):
            time.sleep(0.05)
"""


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


def one_kernel_per_notebook(sessions: list[dict]) -> dict[str, str]:
    """notebook path -> its kernel id; fails if a notebook has two kernels."""
    kernels = collections.defaultdict(set)
    for session in sessions:
        kernels[session["path"]].add(session["kernel"]["id"])
    assert all(len(ids) == 1 for ids in kernels.values()), dict(kernels)
    return {path: ids.pop() for path, ids in kernels.items()}


async def sessions(api) -> list[dict]:
    code, body = await api.call("GET", "api/sessions")
    assert code == 200, body
    return body


async def restoring(api, notebook: str) -> None:
    """Until the status shows ``notebook``'s kernel restoring (a wait, not a speed check)."""
    for _ in range(4800):
        status = await api.status()
        if any(k["notebook"] == notebook and k["state"] == "restoring" for k in status["kernels"]):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{notebook} never restoring: {status}")


@pytest.mark.parametrize("when", ["before", "starting", "restoring", "after"])
async def test_the_lab_and_the_resume_share_one_kernel_per_notebook(api, tmp_path, when):
    flag = tmp_path / "restore-may-go-on"
    for notebook in NOTEBOOKS:
        _, kid = await api.lab_session(notebook)
        await api.run_cell(kid, f"x = {notebook!r}")
    a_kernel = (await api.status())["kernels"]
    [a_kernel] = [k["kernel_id"] for k in a_kernel if k["notebook"] == "a.ipynb"]
    await api.run_cell(a_kernel, f"{GATE}\ngate = Gate({str(flag)!r})")
    flag.touch()  # the pause's own read-back must not wait
    status = await api.pause()
    assert status["state"] == "paused", status
    flag.unlink()

    sm = api.serverapp.session_manager
    lab: asyncio.Task | None = None
    if when != "restoring":
        flag.touch()
    if when == "before":  # the lab reopened the notebook before Resume was clicked
        lab = asyncio.ensure_future(api.lab_session("a.ipynb"))
        await lab
    elif when == "starting":  # the resume's kernel start for a.ipynb is held until the lab asked
        arrived, go = asyncio.Event(), asyncio.Event()
        start, exists = sm.start_kernel_for_session, sm.session_exists

        async def held_start(*args, **kwargs):
            if kwargs.get("path") == "a.ipynb":
                await go.wait()
            return await start(*args, **kwargs)

        async def noted_exists(path=None, **kwargs):
            if path and not path.endswith(".ipynb"):  # the lab's UUID path
                arrived.set()
            return await exists(path=path, **kwargs)

        sm.start_kernel_for_session, sm.session_exists = held_start, noted_exists
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    if when == "starting":
        lab = asyncio.ensure_future(api.lab_session("a.ipynb"))
        await arrived.wait()
        go.set()
    elif when == "restoring":  # the restore of a.ipynb is held inside the kernel
        await restoring(api, "a.ipynb")
        lab = asyncio.ensure_future(api.lab_session("a.ipynb"))
        _, kid = await lab
        # a cell the lab sends now waits for the restore: it sees the restored state
        cell = asyncio.ensure_future(api.try_cell(kid, "print(x)"))
        await asyncio.sleep(0)
        flag.touch()
        assert await cell == ("ok", "a.ipynb\n")
    status = await api.settle()
    if when == "after":
        lab = asyncio.ensure_future(api.lab_session("a.ipynb"))
    _, lab_kernel = await lab
    assert status["state"] in ("ready", "running") and status["last_error"] is None, status
    # ready, or running once a cell ran after the resume
    assert all(k["state"] in ("ready", "running") for k in status["kernels"]), status["kernels"]
    restored = {k["notebook"]: k["kernel_id"] for k in status["kernels"]}
    assert set(restored) == set(NOTEBOOKS), status["kernels"]
    assert lab_kernel == restored["a.ipynb"]
    assert one_kernel_per_notebook(await sessions(api)) == restored
    assert sorted(api.serverapp.kernel_manager.list_kernel_ids()) == sorted(restored.values())
    for notebook, kid in restored.items():
        assert await api.run_cell(kid, "print(x)") == f"{notebook}\n"
    if when == "starting":
        sm.start_kernel_for_session, sm.session_exists = start, exists

    # the next pause takes each notebook once, and the next resume brings both back
    status = await api.pause()
    assert status["state"] == "paused", status
    assert sorted(k["notebook"] for k in status["paused"]["kernels"]) == list(NOTEBOOKS)
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready" and status["last_error"] is None, status
    assert one_kernel_per_notebook(await sessions(api)).keys() == set(NOTEBOOKS)


async def test_the_labs_kernel_of_a_paused_notebook_has_the_snapshots_hash_seed(api):
    """Issue 27.5, the natural flow: the lab opens the notebook (its request as JupyterLab sends
    it), the pause takes it, the lab reopens it before Resume is clicked; that kernel has the
    snapshot's seed, so the resume says nothing about seeds and a set of strings iterates as
    before. One seed per notebook, whatever UUID the lab's request carried."""
    check = ("import os\nprint(os.environ['PYTHONHASHSEED'], "
             "list(set(f'word{i}' for i in range(40))) == order)")
    _, kid = await api.lab_session("work/seeded.ipynb")
    await api.run_cell(kid, "order = list(set(f'word{i}' for i in range(40)))")
    status = await api.pause()
    [entry] = status["paused"]["kernels"]
    assert status["state"] == "paused" and entry["hash_seed"], entry

    _, lab = await api.lab_session("work/seeded.ipynb")  # the reload, before Resume is clicked
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    [kernel] = (await api.settle())["kernels"]
    assert kernel["state"] == "ready" and kernel["kernel_id"] == lab, kernel
    assert not any("hash seed" in w for w in kernel["result"]["warnings"]), kernel["result"]
    assert (await api.run_cell(lab, check)).split() == [entry["hash_seed"], "True"]


async def test_a_cell_sent_to_a_reused_kernel_during_the_resume_waits_for_the_restore(api,
                                                                                     tmp_path):
    """The lab's tab is connected before Resume is clicked and its kernel is busy in a cell: the
    restore request goes into the kernel's queue as soon as the resume reaches the kernel (no
    readiness round trip first, which a busy kernel answers only after its cell), so a cell the
    tab sends while the resume is restoring runs after the restore. The tab's cell is sent the
    way the lab sends it, at once on its open connection."""
    flag = tmp_path / "cell-may-end"
    _, kid = await api.lab_session("c.ipynb")
    await api.run_cell(kid, "x = 'restored'")
    await api.pause()
    _, lab = await api.lab_session("c.ipynb")
    client = own_client(api.serverapp.kernel_manager.get_kernel(lab))
    client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
    try:
        await client.wait_for_ready(timeout=60)
        busy = client.execute(f"import os, time\nwhile not os.path.exists({str(flag)!r}): "
                              "time.sleep(0.05)")
        code, body = await api.call("POST", "gkeresume/api/resume", {})
        assert code == 202, body
        await restoring(api, "c.ipynb")
        cell = client.execute("print(x)")
        flag.touch()
        assert (await outcome(client, busy))[0] == "ok"
        assert await outcome(client, cell) == ("ok", "restored\n")
    finally:
        client.stop_channels()
    status = await api.settle()
    assert status["state"] == "ready" and [k["kernel_id"] for k in status["kernels"]] == [lab]


async def outcome(client, msg_id: str) -> tuple[str, str]:
    """(reply status, its stdout or error) of the cell ``msg_id`` sent on ``client``."""
    reply = await reply_to(client, msg_id, timeout=240)
    out = []
    while True:
        msg = await client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return reply["content"]["status"], "".join(out)


def test_the_notebook_of_a_session_request():
    """As jupyter_server reads a session's file (``get_kernel_env``: ``name`` in the directory of
    ``path``): JupyterLab's UUID path with the file's name; a client giving the notebook's path
    as both, or the file's name; no name."""
    assert session_notebook("work/0b1c-uuid", "train.ipynb") == "work/train.ipynb"
    assert session_notebook("work/train.ipynb", "work/train.ipynb") == "work/train.ipynb"
    assert session_notebook("/work/./train.ipynb", "train.ipynb") == "work/train.ipynb"
    assert session_notebook("work/train.ipynb", None) == "work/train.ipynb"
    assert session_notebook(None, "train.ipynb") is None


async def test_a_resume_between_the_labs_request_and_its_rename_restores_into_that_kernel(api):
    """The lab has its session (UUID path) but has not renamed it to the notebook yet when the
    resume comes: the resume takes that kernel, and it counts as the notebook's kernel (status,
    the restore's notebook check, the next pause), not the UUID's."""
    _, kid = await api.lab_session("d.ipynb")
    await api.run_cell(kid, "x = 'restored-d'")
    await api.pause()
    code, body = await api.call("POST", "api/sessions", {
        "path": "0f1e2d3c-lab-uuid", "name": "d.ipynb", "type": "notebook",
        "kernel": {"name": "python3"}})
    assert code == 201, body
    lab = body["kernel"]["id"]
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready" and status["last_error"] is None, status
    assert [(k["kernel_id"], k["notebook"]) for k in status["kernels"]] == [(lab, "d.ipynb")]
    assert await api.run_cell(lab, "print(x)") == "restored-d\n"
    status = await api.pause()
    assert [k["notebook"] for k in status["paused"]["kernels"]] == ["d.ipynb"]
