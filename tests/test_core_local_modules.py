"""The session's own modules (``import mycfg`` from the notebook's folder) keep what the session
set on them: a fresh kernel re-imports the file as it is on disk, so ``mycfg.lr = 0.1`` and
``mycfg.items.append(3)`` were back to the file's values after a resume while it said exact."""

from __future__ import annotations

MYCFG = '''
import dataclasses, enum, threading

lr = 0.5
items = [1, 2]
_lock = threading.Lock()  # the import makes it again: never named


def scale(x):
    return x * lr


class Mode(enum.Enum):
    TRAIN = 1
    EVAL = 2


@dataclasses.dataclass
class Config:
    batch: int = 8
    seen = []  # a class attribute the session appends to

    @property
    def double(self):
        return self.batch * 2
'''

SUB = '''
counter = 0
'''

SESSION = r'''
import json, threading, mycfg, pkg.sub
mycfg.lr = 0.1
mycfg.items.append(3)
settings = mycfg.items
mycfg.helper = mycfg.scale            # a function of the module under another name
mycfg.schedule = lambda epoch: 0.9 ** epoch   # a notebook function set on the module
mycfg.guard = threading.Lock()        # held: cannot travel, and the import does not make it
mycfg.guard.acquire()
pkg.sub.counter += 2
mycfg.Config.batch = 32               # the dataclass field's class default
mycfg.Config.seen.append("epoch 1")
mode = mycfg.Mode.EVAL
'''

OBSERVE = r'''
print(json.dumps([mycfg.lr, mycfg.items, settings is mycfg.items, mycfg.helper(10),
                  mycfg.schedule(2), pkg.sub.counter, hasattr(mycfg, "guard"),
                  type(mycfg._lock).__name__, mycfg.Config.batch, mycfg.Config().double,
                  mycfg.Config.seen, mode is mycfg.Mode.EVAL]))
'''


def test_what_the_session_set_on_its_own_modules_comes_back(start_kernel, kernel_env, tmp_path):
    """Values set, a list appended to and shared with a variable, a notebook function and an
    alias set on a module of the notebook's folder (and on a package's submodule), class
    attributes of its classes (an Enum among them, untouched) come back; a
    lock the session set is named, so the verdict is partial with that one reason; the module's
    own lock, which the import makes again, is not named."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "mycfg.py").write_text(MYCFG)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "sub.py").write_text(SUB)
    kernel_env["GKERESUME_TEST_CWD"] = str(project)

    a = start_kernel()
    a.run(SESSION)
    before = a.run_json(OBSERVE)
    assert before == [0.1, [1, 2, 3], True, 1.0, 0.81, 2, True, "lock", 32, 16, ["epoch 1"], True]
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    after = b.run_json(OBSERVE)
    assert after == [*before[:6], False, *before[7:]], out
    assert "(partial)" in out.splitlines()[0], out
    [note] = [line for line in out.splitlines() if line.startswith("  note: ")]
    assert note == "  note: left out: local module state", out
    [warning] = [line for line in out.splitlines() if "local module state" in line and line != note]
    assert warning.endswith("not set again: mycfg.guard (_thread.lock (a lock held at the pause: "
                            "whoever holds it stays on the old pod))"), out
    assert "_lock" not in out and "pkg.sub" not in out, out
    assert "attributes set on libraries" not in out, "the module's entry carries them, once"


RECORDING = '''
class Recording(type):
    assigned = []

    def __setattr__(cls, name, value):
        Recording.assigned.append(name)
        super().__setattr__(name, value)


class Model(metaclass=Recording):
    fields = {"a": 1}
    changed = 0
'''


def test_a_class_attribute_the_session_did_not_change_is_left_as_the_import_made_it(
        tmp_path, monkeypatch):
    """Only what differs from the fresh import is assigned on the session's classes: a metaclass
    that reacts to assignments (pydantic's, SQLAlchemy's) sees the session's change alone."""
    import importlib
    import sys

    from kernel_hooks import local_modules

    local_modules.remember_baseline()  # as the extension does when it loads
    (tmp_path / "recorded_models.py").write_text(RECORDING)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("recorded_models")
    try:
        module.Model.changed = 5
        state = local_modules._capture()
        assert state["modules"]["recorded_models"]["Model.changed"] == 5
        del sys.modules["recorded_models"]
        fresh = importlib.import_module("recorded_models")  # as the resumed kernel imports it
        assert fresh.Model.changed == 0 and fresh.Recording.assigned == []
        assert local_modules._restore(state) is None
        # (``assigned`` itself comes back as the session had it: ["changed"], then this one)
        assert fresh.Model.changed == 5 and "fields" not in fresh.Recording.assigned
    finally:
        sys.modules.pop("recorded_models", None)


def test_a_module_edited_during_the_pause_keeps_the_files_values_and_is_named(
        tmp_path, monkeypatch):
    """The user edits ``settings_edited.py`` while the kernel is paused: the resumed kernel imports
    the new file, and the session's values (from the old file) do not overwrite the edit; the
    module is named, so the resume is not exact."""
    import importlib
    import sys

    from kernel_hooks import local_modules

    local_modules.remember_baseline()
    source = tmp_path / "settings_edited.py"
    source.write_text("lr = 0.5\nsteps = 10\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("settings_edited")
    try:
        module.steps = 20
        state = local_modules._capture()
        del sys.modules["settings_edited"]
        source.write_text("lr = 0.01\nsteps = 10\n")  # edited during the pause
        fresh = importlib.import_module("settings_edited")
        why = local_modules._restore(state)
        assert why.startswith("not set again: settings_edited (") and "changed since" in why
        assert (fresh.lr, fresh.steps) == (0.01, 10)
    finally:
        sys.modules.pop("settings_edited", None)


def test_a_module_edited_after_its_import_is_named(tmp_path, monkeypatch):
    """The user rewrites ``helpers_stale.py`` (``%%writefile``, an editor) after importing it and
    pauses without reloading it: the session still ran the imported code, the resumed kernel
    imported the new file and ran that, under an exact verdict (found by a probe: ``f()`` gave
    'v2' after the cut, 'v1' without it). The module is named. A file whose code did not change
    (a comment added above, which moves every line) is not."""
    import importlib
    import sys

    from kernel_hooks import local_modules

    local_modules.remember_baseline()
    monkeypatch.syspath_prepend(str(tmp_path))
    code = ("def f():\n    return 'v{v}'\n\nclass K:\n    @property\n    def who(self):\n"
            "        return 'K{v}'\n\nsteps = 10\n")
    stale, moved = tmp_path / "helpers_stale.py", tmp_path / "helpers_moved.py"
    stale.write_text(code.format(v=1))
    moved.write_text(code.format(v=1))
    modules = [importlib.import_module(name) for name in ("helpers_stale", "helpers_moved")]
    try:
        for module in modules:
            module.steps = 20
        stale.write_text(code.format(v=2))
        moved.write_text("# a note\n\n" + code.format(v=1))
        state = local_modules._capture()
        assert state["stale"] == ["helpers_stale"], state["stale"]
        for name in ("helpers_stale", "helpers_moved"):
            del sys.modules[name]
        fresh = importlib.import_module("helpers_stale")
        why = local_modules._restore(state)
        assert why == (f"not set again: helpers_stale ({stale} was edited after the session "
                       "imported it: the session ran the code it had imported, this kernel "
                       "runs the file's)"), why
        assert (fresh.f(), fresh.steps) == ("v2", 20)
        assert sys.modules["helpers_moved"].steps == 20
    finally:
        for name in ("helpers_stale", "helpers_moved"):
            sys.modules.pop(name, None)
