"""The notebook's progress bar (kernel_hooks/progress.py): the wording as pure functions, and a
real kernel whose ``%checkpoint`` sends a ``text/html`` ``<progress>`` bar with a ``text/plain``
fallback, displayed once and then updated in place (``update_display_data``)."""

from __future__ import annotations

import re

from kernel_hooks.progress import CellProgress, bundle, describe, render, render_html, seconds_left
from kernel_hooks.results import Progress

MIB = 1 << 20


def test_one_sentence_with_bytes_rate_and_time_left():
    p = Progress("writing", 256 * MIB, 1024 * MIB, 2.0)  # 128 MiB/s
    assert describe(p) == "Writing 256 MiB of 1.0 GiB at 128 MiB/s, about 6 s left"
    assert seconds_left(p) == 6.0
    assert describe(Progress("done", 1024 * MIB, 1024 * MIB, 8.0)) == "Done 1.0 GiB of 1.0 GiB in 8 s"
    assert seconds_left(Progress("reading", 0, 0, 0.0)) is None
    # The phase is named once: the bar line is "[###...]  25%  Writing ...", no repeated words.
    line = render(p)
    assert line.startswith("[######..................]  25%  Writing 256 MiB")
    assert len(re.findall(r"writing", line, re.I)) == 1


def test_html_bar_escapes_and_carries_the_fraction():
    p = Progress("reading", 3 * MIB, 4 * MIB, 1.0)
    page = render_html(p)
    assert '<progress value="0.7500" max="1"' in page
    assert "Reading 3.0 MiB of 4.0 MiB at 3.0 MiB/s, under a second left" in page
    assert set(bundle(p)) == {"text/html", "text/plain"}


def test_cell_progress_displays_once_then_updates_in_place(monkeypatch):
    shown: list[tuple[str, dict]] = []

    class Handle:
        def update(self, data, raw):
            shown.append(("update", data))

    def display(data, raw, display_id):
        assert raw and display_id is True
        shown.append(("display", data))
        return Handle()

    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setattr("kernel_hooks.progress.time.monotonic", lambda: 0.0)  # one instant
    sink = CellProgress()
    sink(Progress("writing", 0, 10 * MIB, 0.1))
    sink(Progress("writing", MIB, 10 * MIB, 0.1))  # within MIN_INTERVAL: superseded
    sink(Progress("writing", 10 * MIB, 10 * MIB, 0.9))  # held, shown as the phase ends
    sink(Progress("committing", 10 * MIB, 10 * MIB, 1.0))  # a phase change: always shown
    sink(Progress("done", 10 * MIB, 10 * MIB, 1.2))
    assert [kind for kind, _ in shown] == ["display", "update", "update", "update"]
    assert "10.0 MiB of 10.0 MiB" in shown[1][1]["text/plain"]
    assert all("<progress" in data["text/html"] and data["text/plain"] for _, data in shown)


def test_checkpoint_in_a_real_kernel_sends_an_html_bar_updated_in_place(start_kernel):
    kernel = start_kernel()
    kernel.run("import numpy as np\n"
               "parts = [np.arange(2 * 2**20, dtype=np.float64) + i for i in range(6)]")
    messages: list[dict] = []
    reply = kernel.client.execute_interactive("%checkpoint", output_hook=messages.append, timeout=300)
    assert reply["content"]["status"] == "ok"
    shown = [m for m in messages if m["msg_type"] == "display_data"
             and "<progress" in m["content"]["data"].get("text/html", "")]
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert len(shown) == 1, [m["msg_type"] for m in messages]
    display_id = shown[0]["content"]["transient"]["display_id"]
    assert shown[0]["content"]["data"]["text/plain"].startswith("[")
    assert updates and all(u["content"]["transient"]["display_id"] == display_id for u in updates)
    last = updates[-1]["content"]["data"]
    assert '<progress value="1.0000"' in last["text/html"]
    assert "Done" in last["text/plain"]
