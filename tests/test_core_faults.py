"""Nothing is lost: kill -9 mid-checkpoint, corrupt blobs, vanished libraries, bad input.
Real kernels, real files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_gkeresume.snapshot import Manifest, SnapshotStore

STORE_SNAPSHOTS = "test-ws/snapshots"


def manifests(env) -> list[Manifest]:
    folder = Path(env["GKERESUME_STORE"]) / STORE_SNAPSHOTS
    return [Manifest.from_json(p.read_bytes()) for p in sorted(folder.glob("*.json"))]


def blob_file(env, digest: str) -> Path:
    return Path(SnapshotStore(env["GKERESUME_STORE"], "test-ws").blob_path(digest))


def test_second_checkpoint_writes_only_what_changed(start_kernel):
    k = start_kernel()
    k.run("import torch, numpy as np, kernel_hooks\n"
          "weights = torch.randn(512, 1024)\narr = np.random.rand(300, 300)\n"
          "small = np.arange(10)\ncount = 1")
    first = k.run_json("r = kernel_hooks.checkpoint()\n"
                       "print(__import__('json').dumps([r.bytes_new, r.bytes_reused]))")
    assert first[0] > 2_500_000 and first[1] == 0
    k.run("count = 2\nsmall[3] = 99")
    second = k.run_json("r = kernel_hooks.checkpoint()\n"
                        "print(__import__('json').dumps([r.bytes_new, r.bytes_reused]))")
    assert second[0] < 16_000, "only the graph and the small pack are new"
    assert second[1] > 2_500_000
    listing = k.run("%snapshots")
    assert "$/month" in listing and "workspace: 2 snapshots" in listing and "/month" in listing


def test_kill_during_checkpoint_leaves_no_partial_snapshot(start_kernel, kernel_env, tmp_path):
    a = start_kernel()
    a.run("import torch, kernel_hooks\nkeep = torch.arange(1000.)\n")
    a.run("%checkpoint -n before")
    assert [m.name for m in manifests(kernel_env)] == ["before"]
    marker = tmp_path / "writing"
    a.run("big = [torch.randn(8 << 20) for _ in range(12)]")  # 12 blobs of 32 MiB
    a.client.execute(
        "import os\nos.environ['GKERESUME_CONCURRENCY'] = '1'\n"
        f"kernel_hooks.checkpoint('after', progress=lambda p: open({str(marker)!r}, 'w').close())"
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "checkpoint never started writing"
        time.sleep(0.01)
    a.kill()
    blobs = list((Path(kernel_env["GKERESUME_STORE"]) / "test-ws" / "blobs").rglob("*"))
    assert any(p.is_file() for p in blobs)
    assert [m.name for m in manifests(kernel_env)] == ["before"], "no partial snapshot listed"

    b = start_kernel()
    assert "before" in b.run("%snapshots") and "after" not in b.run("%snapshots")
    b.run("%resume before")
    assert b.run("print(float(keep.sum()))") == "499500.0\n"


def test_corrupt_blob_costs_only_the_objects_that_need_it(start_kernel, kernel_env):
    a = start_kernel()
    a.run("import torch, numpy as np\n"
          "doomed = torch.full((300_000,), 7.0)\n"          # 1.2 MB: a blob of its own
          "doomed_view = doomed[:10]\n"
          "holder = {'inner': doomed}\n"
          "fine = torch.full((400_000,), 3.0)\n"
          "arr = np.ones((500, 500))\n"
          "text = 'still here'")
    a.run("%checkpoint")
    (manifest,) = manifests(kernel_env)
    (ref,) = [s for s in manifest.storages.values() if s.nbytes == 1_200_000]
    path = blob_file(kernel_env, ref.blob)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    for name in ("doomed", "doomed_view", "holder"):
        assert f"not restored: {name}" in out
    assert "corrupt" in out
    state = b.run_json("import json\nprint(json.dumps([float(fine.sum()), float(arr.sum()), text, "
                       "'doomed' in globals(), 'holder' in globals()]))")
    assert state == [1_200_000.0, 250_000.0, "still here", False, False]


def test_object_whose_library_vanished_is_named_the_rest_loads(start_kernel, kernel_env, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "vanishing.py").write_text("class Thing:\n    def __init__(self):\n        self.v = 5\n")
    a = start_kernel()
    a.run(f"import sys\nsys.path.insert(0, {str(lib)!r})\nimport vanishing\n"
          "thing = vanishing.Thing()\nboth = [thing, 'x']\nplain = {'a': 1}\nafter = 2")
    a.run("%checkpoint")
    a.kill()
    (lib / "vanishing.py").unlink()
    b = start_kernel()
    assert "partial" in b.run("%snapshots")
    out = b.run("%resume")
    assert "not restored: thing" in out and "vanishing" in out
    assert "not restored: both" in out
    assert b.run_json("import json\nprint(json.dumps([plain, after]))") == [{"a": 1}, 2]


def test_only_restores_the_named_variables(start_kernel):
    a = start_kernel()
    a.run("x = 1\ny = [x, 2]\nz = 'z'")
    a.run("%checkpoint")
    b = start_kernel()
    out = b.run("%resume latest --only y,z")
    assert "restored: y, z" in out
    assert b.run("print(y, z, 'x' in globals())") == "[1, 2] z False\n"
    with pytest.raises(AssertionError, match=r"not in snapshot .*: nope"):
        b.run("%resume --only nope")


def test_app_checkpoints_and_resume_hooks(start_kernel):
    a = start_kernel()
    a.run(r'''
import sqlite3, kernel_hooks
db = sqlite3.connect(":memory:")
db.execute("create table t (v int)"); db.execute("insert into t values (7)")
def rebuild(dump):
    conn = sqlite3.connect(":memory:")
    conn.executescript("\n".join(dump))
    return conn
kernel_hooks.register("db", save=lambda c: list(c.iterdump()), load=rebuild)
resumed_with = []
@kernel_hooks.on_resume
def note(result):
    resumed_with.append(result.snapshot_id)
''')
    a.run("%checkpoint")
    b = start_kernel()
    out = b.run("%resume")
    assert "not restored: db" not in out
    assert b.run("print(db.execute('select v from t').fetchall(), len(resumed_with))") == "[(7,)] 1\n"


def test_bad_references_and_malformed_manifest_give_clear_errors(start_kernel, kernel_env):
    k = start_kernel()
    k.run("v = 1")
    k.run("%checkpoint")
    (good,) = manifests(kernel_env)
    with pytest.raises(AssertionError, match=f"no snapshot '20991231T000000Z-abcdef'.*{good.snapshot_id}"):
        k.run("%resume 20991231T000000Z-abcdef")
    with pytest.raises(AssertionError, match="not a usable snapshot name"):
        k.run("%resume ../../etc/passwd")
    folder = Path(kernel_env["GKERESUME_STORE"]) / STORE_SNAPSHOTS
    broken = "20000101T000000Z-000000"
    (folder / f"{broken}.json").write_text('{"format": "gkeresume.snapshot", "format_version": 1')
    listing = k.run("%snapshots")
    assert broken in listing and "not valid JSON" in listing
    with pytest.raises(AssertionError, match="manifest is not valid JSON"):
        k.run(f"%resume {broken}")
    tampered = json.loads((folder / f"{good.snapshot_id}.json").read_text())
    tampered["name"] = "renamed"
    (folder / f"{good.snapshot_id}.json").write_text(json.dumps(tampered))
    with pytest.raises(AssertionError, match="signature mismatch"):
        k.run(f"%resume {good.snapshot_id}")


def test_type_registration_applies_inside_containers(start_kernel):
    a = start_kernel()
    a.run(r'''
import threading, kernel_hooks
class Worker:
    def __init__(self, n):
        self.n = n
        self.lock = threading.Lock()
kernel_hooks.register(Worker, save=lambda w: w.n, load=lambda n: Worker(n))
pool = {"w": Worker(3)}
''')
    assert "not captured" not in a.run("%checkpoint")
    b = start_kernel()
    b.run("%resume")
    assert b.run("print(pool['w'].n, type(pool['w'].lock).__name__)") == "3 lock\n"


def test_equal_storages_share_a_blob_but_come_back_distinct(start_kernel):
    a = start_kernel()
    a.run("import torch, numpy as np\nt = torch.randn(64, 32)\nt_copy = t.clone()\n"
          "big = torch.ones(400_000)\nbig_copy = big.clone()\nn = np.ones(20_000)\nn_copy = n.copy()")
    out = a.run("%checkpoint")
    assert "not captured" not in out
    b = start_kernel()
    out = b.run("%resume")
    assert "not restored" not in out and "warning:" not in out
    assert b.run("t_copy.zero_(); big_copy.zero_(); n_copy[:] = 0\n"
                 "print(bool(t.abs().sum() > 0), float(big.sum()), float(n.sum()))") \
        == "True 400000.0 20000.0\n"


def test_two_restores_of_one_snapshot_run_one_at_a_time(start_kernel, tmp_path):
    """The restore lease: while tab 1 restores, tab 2 is told who holds it, or waits."""
    started, go = tmp_path / "started", tmp_path / "go"
    a = start_kernel()
    a.run(f'''
import os, time, kernel_hooks
@kernel_hooks.on_resume
def hold_until_go(result):
    if os.environ.get("HOLD_RESTORE"):
        open({str(started)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
y = 7''')
    a.run("%checkpoint")
    tab1, tab2 = start_kernel(), start_kernel()
    tab1.run("import os\nos.environ['HOLD_RESTORE'] = '1'")
    tab1.client.execute("import kernel_hooks\nr1 = kernel_hooks.resume()")
    deadline = time.monotonic() + 120
    while not started.exists():
        assert time.monotonic() < deadline, "tab 1 never started restoring"
        time.sleep(0.05)
    told = tab2.run_json(
        "import json, kernel_hooks\nfrom jupyter_gkeresume.errors import LeaseHeldError\n"
        "try:\n    kernel_hooks.resume(lease_wait=0)\n    print(json.dumps('ran'))\n"
        "except LeaseHeldError as exc:\n    print(json.dumps(exc.holder))")
    assert told != "ran" and "pid" in told
    tab2.client.execute("r2 = kernel_hooks.resume(lease_wait=120)")
    go.touch()
    expected = "7 ['os', 'time', 'kernel_hooks', 'hold_until_go', 'y']\n"
    assert tab2.run("print(y, r2.restored)", timeout=180) == expected
    assert tab1.run("print(y, r1.restored)") == expected


def test_resume_replay_rebuilds_what_could_not_be_captured(start_kernel):
    a = start_kernel()
    a.run("data = [1, 2, 3]")
    a.run("squares = (x * x for x in data); first = next(squares)")  # running: not captured
    a.run("total = sum(data)")
    a.run("%checkpoint")
    a.kill()
    b = start_kernel()
    out = b.run("%resume --replay")
    assert "not restored: squares" in out and "replay: back: squares" in out
    assert b.run("print(first, list(squares), total)") == "1 [4, 9] 6\n"


def test_user_setstate_never_sees_the_bytes_of_a_tampered_blob(start_kernel, kernel_env):
    """Issue 22 item 5: the unpickler overlaps the reads, but a user ``__setstate__`` gets a
    storage only after its blob was read and verified. Its blobs here are rewritten with other
    bytes of the same size; ``__setstate__`` waits (up to 5 s) for bytes other than zeros to
    appear and records what it sees: never the planted ones, only zeros, and the object is
    reported as not restored."""
    a = start_kernel()
    a.run("import numpy as np, torch\n"
          "class Spy:\n"
          "    def __setstate__(self, state):\n"
          "        import builtins, time\n"
          "        deadline = time.monotonic() + 5\n"
          "        views = [state['arr'], state['tensor'].numpy()]\n"
          "        while not all(v.any() for v in views) and time.monotonic() < deadline:\n"
          "            time.sleep(0.01)\n"
          "        builtins.__dict__.setdefault('SEEN', []).append([bytes(v[:16]) for v in views])\n"
          "        self.__dict__.update(state)\n"
          "spy = Spy()\n"
          "spy.arr = np.full(1 << 20, 1, dtype=np.uint8)\n"
          "spy.tensor = torch.full((1 << 20,), 2, dtype=torch.uint8)\n"
          "other = np.arange(10)")
    a.run("%checkpoint")
    (manifest,) = manifests(kernel_env)
    evil = b"EVIL-os.system()"
    for ref in (s for s in manifest.storages.values() if s.owner == "spy"):
        path = blob_file(kernel_env, ref.blob)
        data = bytearray(path.read_bytes())
        data[-ref.nbytes:] = evil * (ref.nbytes // len(evil))
        path.write_bytes(bytes(data))
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "not restored: spy" in out and "corrupt" in out
    seen = b.run_json("import builtins, json\nprint(json.dumps([[v.hex() for v in views] "
                      "for views in builtins.SEEN]))")
    assert seen == [[bytes(16).hex(), bytes(16).hex()]], seen
    assert b.run_json("print(int(other.sum()))") == 45


HOSTILE = r"""
class Hostile:  # every attribute lookup raises, __class__ included: isinstance() raises too
    def __getattribute__(self, name):
        raise RuntimeError("no " + name)

class Weird:  # properties that raise where the checkpoint looks
    @property
    def __dict__(self):
        raise RuntimeError("no dict")

    @property
    def shape(self):
        raise RuntimeError("no shape")

import json
hostile, weird, nested, kept = Hostile(), Weird(), {"inside": Hostile()}, [1, 2]
"""


def test_an_object_that_raises_when_looked_at_costs_only_itself(start_kernel):
    """An object whose attribute lookups raise (``__class__`` too, so ``isinstance`` on it
    raises) failed the whole checkpoint wherever the capture looked at it outside the pickling
    of its own record (the record order, ``held_key``, the description; found with a
    ``BufferedWriter`` over a ``BytesIO`` and a nested tensor's ``shape``). Each is named
    alone; the rest is saved and comes back."""
    a = start_kernel()
    a.run(HOSTILE)
    out = a.run("%checkpoint")
    assert "not saved: hostile [__main__.Hostile]: could not be inspected: RuntimeError: no " \
           "__class__" in out, out
    assert "not saved: nested" in out and "not saved: kept" not in out, out
    a.kill()
    b = start_kernel()
    out = b.run("%resume")
    assert "not restored: hostile, nested" in out or "not restored: nested, hostile" in out, out
    assert b.run_json("print(json.dumps([kept, type(weird).__name__]))") == [[1, 2], "Weird"]


SLOW_FIRST_IMPORTS = r"""
import sys, threading, time

class SlowInReaders:
    '''Takes 0.5 s to find numpy's and torch's C extensions when a reader thread of the restore
    imports them: the moment when the unpickler, on the main thread, asks for a submodule.'''
    def find_spec(self, name, path=None, target=None):
        if name in ("numpy._core._multiarray_umath", "torch._C") and \
                threading.current_thread().name.startswith("gkeresume-read"):
            time.sleep(0.5)
        return None

sys.meta_path.insert(0, SlowInReaders())
print(sorted(m for m in ("numpy", "torch") if m in sys.modules))
"""


def test_first_imports_of_numpy_and_torch_do_not_race_the_readers(start_kernel):
    """A resume in a fresh kernel imports numpy and torch for the first time: the blob readers
    (threads) import them to make host buffers while the unpickler (the main thread) imports a
    submodule its records name (``numpy._core.numeric`` for the saved RNG state,
    ``torch.nn.modules.linear`` for a layer). CPython takes a
    submodule's import lock before it imports the parent (importlib._bootstrap,
    ``_find_and_load``), so the two threads each held what the other waited for; the deadlock
    check broke the cycle by handing one a partly initialized module: "cannot import name
    'asanyarray' from partially initialized module 'numpy._core.numeric'", the session state (RNG
    states, cwd, environment) and every record needing numpy lost, and numpy unusable in that
    kernel ("cannot load module more than once per process"). Seen in a probe that kept
    ``torch._dynamo.config`` in a variable, which shifted the timing; here the readers' first
    imports are slowed to pin the interleaving."""
    kernel = start_kernel()
    kernel.run("import numpy, torch\nnumpy.random.seed(3); torch.manual_seed(3)\n"
               "layer = torch.nn.Linear(2, 2)  # its class: a submodule of torch\n"
               "del numpy, torch  # the RNG states and the layer's class need them\n"
               "steps = 7")
    kernel.run("%checkpoint")
    draws = ("import numpy, torch\n"
             "print(numpy.random.rand(2), torch.rand(2), layer.weight.tolist(), steps)")
    expected = kernel.run(draws)
    kernel.kill()
    fresh = start_kernel()
    assert fresh.run(SLOW_FIRST_IMPORTS) == "[]\n"  # a fresh kernel: neither imported yet
    resumed = fresh.run("%resume")
    assert "(exact)" in resumed, resumed
    assert "warning:" not in resumed and "not restored" not in resumed, resumed
    assert fresh.run(draws) == expected


FIRST_IMPORT_THREAD = r"""
import sys, threading

class FirstImportThread:
    '''Notes the thread that finds torch's C extension: the one that runs torch's import.'''
    seen = []
    def find_spec(self, name, path=None, target=None):
        if name == "torch._C":
            self.seen.append(threading.current_thread().name)
        return None

sys.meta_path.insert(0, FirstImportThread())
print("torch" in sys.modules)
"""


def test_torch_is_first_imported_on_the_thread_that_resumes(start_kernel):
    """A resume in a fresh kernel imported torch on a blob reader's thread: a storage of a
    small blob (read, not mapped: the RNG state, a small tensor) needs a torch host buffer, and
    the reader asked for torch before the resuming thread did (every time, on this machine).
    Whatever torch ties to the thread that imports it then belonged to a thread that ends with
    the resume: kineto registers its profiler client there, so every ``torch.profiler`` session
    of the resumed kernel printed "ERROR: External init callback must run in same thread as
    registerClient" (found by a cut check of a notebook that profiles after the cut). The
    readers now wait for the resuming thread's import before they make torch buffers."""
    kernel = start_kernel()
    kernel.run("import torch\ntorch.manual_seed(0)\nsmall = torch.arange(6.0)\n"
               "big = torch.ones(1 << 19)  # 2 MiB: its own blob, mapped\ndel torch")
    kernel.run("%checkpoint")
    kernel.kill()
    fresh = start_kernel()
    assert fresh.run(FIRST_IMPORT_THREAD) == "False\n"
    resumed = fresh.run("%resume")
    assert "(exact)" in resumed, resumed
    assert fresh.run("print(FirstImportThread.seen, small.tolist(), float(big.sum()))") == \
        "['MainThread'] [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] 524288.0\n"
