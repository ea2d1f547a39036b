"""Objects that forward attribute lookups (``__getattr__`` to a wrapped object) and objects that
hold the process's standard streams come back: a tqdm progress bar holds both (tqdm/utils.py
``DisableOnWriteError(ObjectWrapper)`` around ``sys.stderr``), and no bar came back at all."""

from __future__ import annotations

import kernel_hooks


class Forwarding:
    """Forwards what it lacks to ``_inner``, as proxies do: pickle's load looked
    ``__setstate__`` up on the half-made instance and recursed until it failed."""

    def __init__(self, inner):
        self._inner = inner
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_forwarding_object_comes_back(tmp_path):
    import sys

    namespace = {"wrapped": Forwarding([3, 1, 2]), "err": Forwarding(sys.stderr)}
    namespace["wrapped"].calls = 2
    root = str(tmp_path / "store")
    assert not kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws").skipped
    restored: dict = {}
    result = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert result.verdict["level"] == "exact", result.verdict
    assert restored["wrapped"].calls == 2 and restored["wrapped"].index(2) == 2
    assert restored["err"]._inner is sys.stderr


PROGRESS = r"""
import json
from tqdm import tqdm
bar = tqdm(total=10, desc="epochs")
bar.update(3)
steps = tqdm(range(8), file=__import__("sys").stdout)  # the HF course's training-loop bar
steps.update(2)
quiet = tqdm(total=5, disable=True)
"""


def test_a_progress_bar_comes_back_and_goes_on(start_kernel):
    """A bar cut at 3 of 10 is at 3 of 10 after the resume, clears the line it printed and
    writes to the resumed kernel's stderr; one over a range writing to stdout, and a disabled
    one, come back too; nothing is named."""
    a = start_kernel()
    a.run(PROGRESS)
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0] and "not restored" not in out, out
    # clearing pads over the line the bar printed last, as an uncut bar does (tqdm's status
    # printer keeps its length in a closure: after a resume it was 0, found by a helper's probe)
    cleared = b.run("bar.clear()")
    assert cleared.startswith("\r ") and not cleared.strip(" \r"), repr(cleared)
    assert b.run_json("print(json.dumps([bar.n, bar.total, bar.desc]))") == [3, 10, "epochs"]
    assert "4/10" in b.run("bar.update(1); bar.refresh()")
    assert "3/8" in b.run("steps.update(1); steps.refresh()")
    assert b.run_json("print(json.dumps([quiet.disable, quiet.n, list(steps.iterable)[-1]]))") \
        == [True, 0, 7]


NOTEBOOK_BARS = r"""
import json
from tqdm.auto import tqdm
bar = tqdm(total=10, desc="epochs", colour="green")
bar.update(3)
done = tqdm(total=2, leave=True)
done.update(2)
done.close()
quiet = tqdm(total=5, disable=True)
"""


def test_a_notebook_progress_bar_comes_back_and_shows_again_when_it_moves(start_kernel):
    """With ipywidgets installed (the Jupyter images GPU users run), ``tqdm.auto`` gives notebook
    bars (tqdm/notebook.py ``tqdm_notebook``): the bar's ``container`` is an ipywidgets HBox
    whose comm belongs to the kernel, so the bar was not restored and the next cell's
    ``bar.update`` raised NameError (found by cut_check). It comes back at its count with a new
    widget of its colour, shown in the cell where it next moves (the one in the old output died
    with its kernel), also through a second pause before it moved; a closed bar comes back
    closed, a disabled one disabled."""
    a = start_kernel()
    a.run(NOTEBOOK_BARS)
    assert a.run("import tqdm.notebook\nprint(isinstance(bar, tqdm.notebook.tqdm_notebook))") == "True\n"
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0] and "not restored" not in out, out
    assert b.run_json("print(json.dumps([bar.n, bar.total, bar.desc, bar.colour, done.n, "
                      "done.disable, quiet.disable]))") == [3, 10, "epochs", "green", 2, True, True]
    b.run("%checkpoint")  # again, before the bar moved: its widget not yet shown
    b.kill()

    c = start_kernel()
    assert "(exact)" in c.run("%resume").splitlines()[0]
    shown = c.run("bar.update(2)")
    assert "5/10" in shown, shown  # the new widget displayed (its text form) in this cell
    assert c.run("bar.update(1)\nbar.refresh();") == "", "shown once, then updated in place"
    assert c.run_json("print(json.dumps(bar.container.children[1].value))") == 6
    assert c.run("done.update(1)") == "", "a closed bar stays closed"
