"""Callbacks the notebook connected to matplotlib's objects (``kernel_hooks.callbacks``).

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
