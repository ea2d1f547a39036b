"""Pure GPU planning: the pinned ring schedules, device remapping, out-of-memory placement."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot.format import StorageRef
from kernel_hooks.cuda_plan import (
    cuda_index,
    d2h_schedule,
    plan_chunks,
    plan_device_mapping,
    plan_placement,
)
from kernel_hooks.resume_plan import StoragePlace, make_plan, plan_places, usable_bytes

sizes_st = st.lists(st.integers(0, 200), min_size=0, max_size=6)
chunk_st = st.integers(1, 64)
buffers_st = st.integers(1, 5)


@given(sizes_st, chunk_st, buffers_st)
@settings(max_examples=200, deadline=None)
def test_chunks_cover_every_byte_once_in_order(sizes, chunk_bytes, buffers):
    chunks = plan_chunks(sizes, chunk_bytes, buffers)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(c.buffer == c.index % buffers and 0 < c.size <= chunk_bytes for c in chunks)
    for part, nbytes in enumerate(sizes):
        mine = [c for c in chunks if c.part == part]
        assert [c.offset for c in mine] == list(range(0, nbytes, chunk_bytes))
        assert sum(c.size for c in mine) == nbytes
    assert [c.part for c in chunks] == sorted(c.part for c in chunks)


@pytest.mark.parametrize(
    ("sizes", "chunk_bytes", "buffers"), [([-1], 4, 2), ([4], 0, 2), ([4], 4, 0)]
)
def test_bad_plans_are_refused(sizes, chunk_bytes, buffers):
    with pytest.raises(InvalidInputError, match="bad transfer plan"):
        plan_chunks(sizes, chunk_bytes, buffers)


@given(sizes_st, chunk_st, buffers_st)
@settings(max_examples=200, deadline=None)
def test_d2h_schedule_never_overwrites_a_buffer_in_use_and_prefetches(sizes, chunk_bytes, buffers):
    chunks = plan_chunks(sizes, chunk_bytes, buffers)
    state: dict[int, tuple[str, int]] = {}  # buffer -> ("copying" | "held", chunk index)
    delivered, copied = [], []
    for step, c in d2h_schedule(chunks, buffers):
        # The consumer hands its buffer back when the schedule moves on.
        for b, (what, _) in list(state.items()):
            if what == "held":
                del state[b]
        if step == "copy":
            assert c.buffer not in state, f"buffer {c.buffer} refilled while in use"
            state[c.buffer] = ("copying", c.index)
            copied.append(c.index)
        else:
            assert step == "deliver"
            assert state.get(c.buffer) == ("copying", c.index), "delivered before its copy"
            state[c.buffer] = ("held", c.index)
            delivered.append(c.index)
            in_flight = sorted(i for what, i in state.values() if what == "copying")
            # While the consumer holds chunk i, the next buffers-1 chunks are already copying.
            assert in_flight == list(range(c.index + 1, min(c.index + buffers, len(chunks))))
    assert delivered == copied == list(range(len(chunks)))


def test_cuda_index():
    assert [cuda_index(d) for d in ("cuda", "cuda:0", "cuda:7", "cpu", "cuda:x", "xcuda:1")] == [
        0, 0, 7, None, None, None
    ]


def test_mapping_keeps_devices_that_exist_without_warnings():
    mapping = plan_device_mapping(["cuda:1", "cpu", "cuda:0", "cuda:1"], 4)
    assert mapping == {"cuda:0": "cuda:0", "cuda:1": "cuda:1", "cpu": "cpu"}
    assert mapping.warnings == []


def test_mapping_spreads_missing_devices_by_order():
    mapping = plan_device_mapping(["cuda:3", "cuda:0", "cuda:1", "cuda:2", "cuda:5"], 2)
    assert mapping == {
        "cuda:0": "cuda:0", "cuda:1": "cuda:1",
        "cuda:2": "cuda:0", "cuda:3": "cuda:1", "cuda:5": "cuda:0",
    }
    assert len(mapping.warnings) == 3
    assert "cuda:5 does not exist here (2 GPU(s)): its tensors go to cuda:0" in mapping.warnings


def test_mapping_without_gpu_sends_cuda_to_cpu_with_one_warning():
    mapping = plan_device_mapping(["cuda:0", "cuda:1", "cpu", "meta"], 0)
    assert mapping == {"cuda:0": "cpu", "cuda:1": "cpu", "cpu": "cpu", "meta": "meta"}
    assert mapping.warnings == ["no GPU here: tensors of cuda:0, cuda:1 come back on the CPU"]


def test_mapping_of_unknown_devices_and_bare_cuda():
    mapping = plan_device_mapping(["xpu:0", "cuda"], 1)
    assert mapping == {"xpu:0": "cpu", "cuda": "cuda:0"}
    assert mapping.warnings == ["device 'xpu:0' is not supported here: its tensors go to the CPU"]
    with pytest.raises(InvalidInputError):
        plan_device_mapping(["cuda:0"], -1)


GIB = 1 << 30


def test_placement_fits_in_order_and_reports_the_rest_on_cpu():
    storages = {"a": ("cuda:0", 6 * GIB), "b": ("cuda:0", 3 * GIB), "c": ("cuda:0", GIB),
                "h": ("cpu", 50 * GIB)}
    placement = plan_placement(
        [("model", ["a"]), ("big", ["b", "h"]), ("small", ["c"])], storages, {"cuda:0": 8 * GIB}
    )
    assert placement.devices == {"a": "cuda:0", "b": "cpu", "h": "cpu", "c": "cuda:0"}
    assert placement.not_fitted == ["big"]
    assert placement.warnings == ["big: needs 3.0 GiB on cuda:0, not free here: restored on the CPU"]


def test_placement_counts_shared_storages_once_and_keeps_a_reserve():
    storages = {"w": ("cuda:0", 4 * GIB), "m": ("cuda:0", 4 * GIB)}
    objects = [("model", ["w"]), ("opt", ["w", "m"]), ("alias", ["w"])]
    fits = plan_placement(objects, storages, {"cuda:0": 9 * GIB}, reserve_bytes=GIB)
    assert fits.devices == {"w": "cuda:0", "m": "cuda:0"} and fits.not_fitted == []
    tight = plan_placement(objects, storages, {"cuda:0": 9 * GIB}, reserve_bytes=2 * GIB)
    assert tight.devices == {"w": "cuda:0", "m": "cpu"} and tight.not_fitted == ["opt"]


def test_placement_on_an_unknown_gpu_does_not_fit():
    placement = plan_placement([("x", ["s"])], {"s": ("cuda:1", 10)}, {"cuda:0": GIB})
    assert placement.devices == {"s": "cpu"} and placement.not_fitted == ["x"]


def _ref(device: str, nbytes: int, owner: str, kind: str = "torch") -> StorageRef:
    return StorageRef("0" * 64, 0, nbytes, "uint8", device, kind, owner)


STORAGES = {
    "m0": _ref("cuda:0", 6 * GIB, "model"), "m1": _ref("cuda:0", 2 * GIB, "model"),
    "o0": _ref("cuda:1", 3 * GIB, "opt"), "a0": _ref("cuda:1", GIB, "arr", "cuda_array"),
    "n0": _ref("cpu", 10, "table", "numpy"),
}


def test_one_plan_maps_places_and_marks_what_streams():
    plan = plan_places(STORAGES, ["opt", "model"], 1, {0: 10 * GIB}, engine=True)
    places = plan.places
    # one GPU here: cuda:1 maps onto cuda:0; opt (priority) fits first, then model does not
    assert places["o0"] == StoragePlace("cuda:0", 0, True)
    assert places["a0"] == StoragePlace("cuda:0", 0, True)
    assert places["m0"] == places["m1"] == StoragePlace("cpu")
    assert places["n0"] == StoragePlace("cpu")
    assert any("cuda:1 does not exist here" in w for w in plan.warnings)
    assert any(w.startswith("model: needs 8.0 GiB on cuda:0") for w in plan.warnings)


def test_without_the_engine_gpu_storages_are_placed_but_not_streamed():
    plan = plan_places(STORAGES, [], 2, {0: 99 * GIB, 1: 99 * GIB}, engine=False)
    assert plan.places["m0"] == StoragePlace("cuda:0", 0, False)
    assert plan.places["o0"] == StoragePlace("cuda:1", 1, False)
    assert plan.warnings == []


def test_no_gpu_here_puts_everything_on_the_cpu():
    plan = plan_places(STORAGES, [], 0, {}, engine=False)
    assert {p.device for p in plan.places.values()} == {"cpu"}
    assert plan.warnings == ["no GPU here: tensors of cuda:0, cuda:1 come back on the CPU"]


def test_make_plan_asks_the_gpus_once_each():
    class Engine:
        device_count = 2
        asked: list[int] = []

        def memory_info(self, index):
            self.asked.append(index)
            return 20 * GIB, 40 * GIB

    engine = Engine()
    plan = make_plan(STORAGES, [], engine)
    assert engine.asked == [0, 1]
    assert all(p.streamed for k, p in plan.places.items() if k != "n0")
    assert usable_bytes(engine, 0) == 20 * GIB - GIB  # 5% of 40 GiB, at most 1 GiB, reserved
