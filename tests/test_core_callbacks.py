"""Callbacks the notebook connected to matplotlib's objects and observers it registered on
traitlets objects (``kernel_hooks.callbacks``).

matplotlib's ``CallbackRegistry.__getstate__`` (lib/matplotlib/cbook.py) drops every callback
but those it connected itself as picklable ("In general, callbacks may not be pickled, so we
just drop them"): ``ax.callbacks.connect("xlim_changed", on_xlim)`` and
``fig.canvas.mpl_connect("draw_event", on_draw)`` no longer fired after a resume, under an exact
verdict (found by a probe), nor did a slider's ``on_changed`` (matplotlib wraps the function in
a lambda of its own). The notebook's callbacks are kept; matplotlib's own stay its choice."""

from __future__ import annotations

from fixtures_kernels import resumed_elsewhere

SESSION = r"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
limits, draws = [], []

class Watcher:
    def on_draw(self, event):
        draws.append("method")

watcher = Watcher()

def on_xlim(axes):
    limits.append(axes.get_xlim())

ax.callbacks.connect("xlim_changed", on_xlim)
fig.canvas.mpl_connect("draw_event", lambda event: draws.append("lambda"))
fig.canvas.mpl_connect("draw_event", watcher.on_draw)

from matplotlib.widgets import Slider
values = []
slider = Slider(fig.add_axes([0.2, 0.02, 0.6, 0.03]), "lr", 0, 1, valinit=0.5)

def record(value):
    values.append(value)

slider.on_changed(record)  # matplotlib connects lambda val: func(val)
"""
OBSERVE = r"""
limits.clear(); draws.clear(); values.clear()
ax.set_xlim(0, 5)
fig.canvas.draw()
slider.set_val(0.7)
print(len(limits), sorted(draws), values)
"""


def test_the_notebooks_callbacks_still_fire_after_a_resume(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    expected = a.run(OBSERVE)
    assert expected.strip() == "1 ['lambda', 'lambda', 'method', 'method'] [0.7]"  # set_val draws
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert b.run(OBSERVE) == expected
    assert b.run("fig.savefig('plot.png')\nprint('saved')").strip() == "saved"


OBSERVED = r"""
import json
import ipywidgets as widgets
import traitlets

seen = []
slider = widgets.IntSlider(value=3)
slider.observe(lambda change: seen.append(change["new"]), names="value")

class Params(traitlets.HasTraits):
    lr = traitlets.Float(0.1)

    @traitlets.observe("lr")
    def _lr_changed(self, change):
        seen.append(("class", change["new"]))

params = Params()
params.observe(lambda change: seen.append(("any", change["name"])))  # every trait: All
copy = widgets.IntText(1)
link = traitlets.link((slider, "value"), (copy, "value"))
"""
CHANGE = r"""
slider.value = 5
params.lr = 0.3
print(json.dumps([seen, copy.value]))
"""


def test_the_observers_a_session_registered_still_fire_after_a_resume(start_kernel):
    """``slider.observe(fn, "value")`` on an ipywidgets widget, ``params.observe(fn)`` on a
    traitlets object and ``traitlets.link``: ``HasTraits.__getstate__`` (traitlets/traitlets.py)
    empties ``_trait_notifiers`` and its ``__setstate__`` registers again only the class's own
    ``@observe`` handlers, so none of them fired after a resume, under an exact verdict (found
    by a probe). They fire again, the class's handler once, as before."""
    a = start_kernel()
    a.run(OBSERVED)
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert b.run_json(CHANGE) == [
        [5, ["class", 0.3], ["any", "lr"]], 5]
