"""A record that cannot load costs only itself and what depends on it (kernel_hooks/graph.py,
``read_graph``): the records after it load, also when they reference classes and functions that
the failed record was the first to name (pickle memoizes a global once, where it first appears).

CPython's C ``Unpickler.memo = dict`` installs an empty memo (3.10-3.13: ``_pickle.c``
``Unpickler_set_memo`` puts the dict's entries into the memo it then frees), so before this was
fixed one failed record made every later record fail with "Memo value not found". In process."""

from __future__ import annotations

import collections
import functools

import kernel_hooks
from kernel_hooks.graph import read_graph, write_graph
from kernel_hooks.placeholders import Uncaptured
from kernel_hooks.storages import StorageCollector


def _refuse_to_load() -> None:
    raise ImportError("this object's library is gone")


class FailsOnLoad:
    def __reduce__(self):
        return (_refuse_to_load, ())


def test_records_after_a_failed_one_load_with_the_globals_it_named_first():
    shared = [1, 2]
    items = [
        ("bad", [collections.OrderedDict(a=1), functools.partial(max, 0), shared, FailsOnLoad()]),
        ("ordered", collections.OrderedDict(b=2)),  # its class was memoized by "bad"
        ("part", functools.partial(max, 5)),
        ("plain", {"x": 1.5, "y": "text"}),
        ("dependent", {"list": shared}),  # an object "bad" built: a visible placeholder
        ("after", collections.OrderedDict(c=[3])),
    ]
    data, records, _, failed = write_graph(items, StorageCollector)
    assert not failed
    values, failures, lost = read_graph(data, [r.end for r in records])

    assert list(failures) == [0] and "this object's library is gone" in failures[0]
    assert values[1] == collections.OrderedDict(b=2) and type(values[1]) is collections.OrderedDict
    assert values[2](1) == 5
    assert values[3] == {"x": 1.5, "y": "text"}
    assert isinstance(values[4]["list"], Uncaptured) and values[4]["list"] in lost
    assert values[5] == collections.OrderedDict(c=[3])



def test_a_failed_record_does_not_sink_the_resume(tmp_path):
    """Through checkpoint and resume: the record of an object whose class cannot be found at
    resume is named, every other name comes back."""
    namespace = {"first": collections.OrderedDict(k=FailsOnLoad()),
                 "then": collections.OrderedDict(v=1), "text": "kept",
                 "fn": functools.partial(divmod, 7)}
    root = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    restored: dict = {}
    result = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert [s.name for s in result.not_restored] == ["first"]
    assert restored["then"] == collections.OrderedDict(v=1) and restored["text"] == "kept"
    assert restored["fn"](2) == (3, 1)
    assert result.verdict["level"] == "partial"


