"""The walk for attributes set on libraries (``kernel_hooks/library_patches.py``) reads again only
what CPython's own change counters say may have changed since the last walk
(``kernel_hooks/cpython_versions.py``: a class's ``tp_version_tag``, which ``type.__setattr__``
zeroes through ``PyType_Modified``; a dict's ``ma_version_tag``, PEP 509; CPython's
Objects/typeobject.c and Include/cpython/dictobject.h in python/cpython). A checkpoint walks
every loaded class (74-130 ms in real sessions, docs/core.md), so each later checkpoint, the
pause's included, paid that again although nothing changed.

What is proven here: every kind of change between two walks is found by the second, which finds
what a walk from nothing finds; where the counters are missing every walk reads everything; what
leaves ``sys.modules`` is let go."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest

from kernel_hooks import cpython_versions, library_patches

COUNTED = sys.implementation.name == "cpython" and (3, 11) <= sys.version_info < (3, 14)


@pytest.mark.skipif(not COUNTED, reason="the counters are read on CPython 3.11 to 3.13")
def test_the_counters_change_with_every_change_and_only_then():
    """A class's version holds while nothing is set on it or its bases, and changes when an
    attribute is set, replaced or deleted on it or on a base; a dict's changes with every kind of
    change. Neither is 0 where it is known."""
    base = type("Base", (), {})
    derived = type("Derived", (base,), {"x": 1})
    tags = [cpython_versions.class_version(derived)]
    assert tags[0] and cpython_versions.class_version(derived) == tags[0]
    derived.x  # noqa: B018 - reading changes nothing
    vars(derived)["x"]
    assert cpython_versions.class_version(derived) == tags[0]
    for change in (lambda: setattr(derived, "y", 2), lambda: setattr(derived, "y", 3),
                   lambda: delattr(derived, "y"), lambda: setattr(base, "z", 1),
                   lambda: setattr(derived, "__repr__", lambda self: "d")):
        change()
        tags.append(cpython_versions.class_version(derived))
        assert tags[-1] and cpython_versions.class_version(derived) == tags[-1]
    assert len(set(tags)) == len(tags)

    mapping = {"a": 1}
    versions = [cpython_versions.dict_version(mapping)]
    assert versions[0] and cpython_versions.dict_version(mapping) == versions[0]
    for change in (lambda: mapping.__setitem__("a", 2), lambda: mapping.__setitem__("b", 1),
                   lambda: mapping.pop("b"), lambda: mapping.update(c=1),
                   lambda: mapping.setdefault("d", 1), lambda: mapping.clear()):
        change()
        versions.append(cpython_versions.dict_version(mapping))
    assert 0 not in versions and len(set(versions)) == len(versions)
    assert cpython_versions.dict_version({"a": 1}) != cpython_versions.dict_version({"a": 1})


def _labels(found):
    return {patch.label for patch in found}


@pytest.fixture
def notebook_code():
    """A function and a class as a cell defines them (``__module__`` ``__main__``)."""

    def rows(frame):
        return len(frame)

    class Plot:
        def __init__(self, data):
            self.data = data

    rows.__module__ = Plot.__module__ = "__main__"
    return rows, Plot


def _undo():
    """Delete what the test set on libraries (tqdm's, on pandas' classes, included)."""
    for patch in library_patches.find_patches(remembered=False):
        delattr(library_patches._owner(patch), patch.attribute)


def test_the_walk_after_a_walk_finds_every_change_between(notebook_code):
    """Between two walks: a notebook function set on a library class and on a library module,
    ``tqdm.pandas()`` (another distribution's functions on pandas' classes and groupby classes),
    and, with no class changed, an object already on a library class that now holds a notebook
    class (pandas' ``Accessor`` behind ``DataFrame.plot``), back in place and again, then its
    ``__dict__`` replaced whole (the walk keeps each such object's answer while its dict's
    version holds). The second walk finds each; a walk from nothing finds the same."""
    import json

    import pandas
    from tqdm import tqdm

    rows, Plot = notebook_code
    accessor = vars(pandas.DataFrame)["plot"]
    accessor_attributes = dict(vars(accessor))
    try:
        assert library_patches.find_patches(remembered=False) == []
        pandas.DataFrame.rows = rows
        json.rows = rows
        tqdm.pandas(disable=True)
        found = _labels(library_patches.find_patches(remembered=False))
        assert {"pandas.DataFrame.rows", "json.rows", "pandas.DataFrame.progress_apply",
                "pandas.Series.progress_map",
                "pandas.api.typing.DataFrameGroupBy.progress_apply"} <= found

        accessor._accessor = Plot  # the class's attributes are the same objects
        found_after = _labels(library_patches.find_patches(remembered=False))
        assert found_after == found | {"pandas.DataFrame.plot"}
        library_patches._last_walk.clear()
        assert _labels(library_patches.find_patches(remembered=False)) == found_after
        accessor._accessor = accessor_attributes["_accessor"]  # back, in place
        assert _labels(library_patches.find_patches(remembered=False)) == found
        accessor._accessor = Plot
        assert _labels(library_patches.find_patches(remembered=False)) == found_after

        accessor.__dict__ = dict(accessor_attributes)  # back to pandas' own, a new dict
        assert _labels(library_patches.find_patches(remembered=False)) == found
        accessor.__dict__ = {**accessor_attributes, "_accessor": Plot}
        assert _labels(library_patches.find_patches(remembered=False)) == found_after

        del json.rows, pandas.DataFrame.rows
        assert not {"json.rows", "pandas.DataFrame.rows"} & _labels(
            library_patches.find_patches(remembered=False))
    finally:
        accessor.__dict__ = accessor_attributes
        _undo()
    assert library_patches.find_patches(remembered=False) == []


def test_where_the_counters_are_missing_every_walk_reads_everything(monkeypatch, notebook_code):
    """On an interpreter whose counters cannot be read (3.10, 3.14, another implementation:
    the probes answer no), the walk is the full one each time, and finds the same changes."""
    import pandas

    monkeypatch.setattr(cpython_versions, "_classes_counted", lambda: False)
    monkeypatch.setattr(cpython_versions, "_dicts_counted", lambda: False)
    assert cpython_versions.class_version(pandas.DataFrame) == 0
    assert cpython_versions.dict_version({}) == 0
    rows, _ = notebook_code
    accessor = vars(pandas.DataFrame)["plot"]
    try:
        assert library_patches.find_patches(remembered=False) == []
        pandas.DataFrame.rows = rows
        assert _labels(library_patches.find_patches(remembered=False)) == {"pandas.DataFrame.rows"}
        del pandas.DataFrame.rows
        accessor._accessor, held = rows, accessor._accessor
        assert _labels(library_patches.find_patches(remembered=False)) == {"pandas.DataFrame.plot"}
    finally:
        accessor._accessor = held
        if "rows" in vars(pandas.DataFrame):
            del pandas.DataFrame.rows
    assert library_patches.find_patches(remembered=False) == []


def test_a_function_counts_while_its_module_is_loaded_and_what_leaves_is_let_go():
    """A function of another package on a library class counts while its module is loaded (as
    in a walk from nothing), also where the class did not change; a module gone from
    ``sys.modules`` is not held by the walk (its classes are freed)."""
    import pandas

    lender = types.ModuleType("lender_pkg")

    def shout(frame):
        return frame

    shout.__module__ = "lender_pkg"
    exec("class Made:\n    pass", vars(lender))
    vars(lender)["Made"].__module__ = "lender_pkg"
    made = weakref.ref(vars(lender)["Made"])
    sys.modules["lender_pkg"] = lender
    try:
        pandas.Series.shout = shout
        library_patches.find_patches(remembered=False)  # the walk that remembers
        candidates = _labels(library_patches._candidates())
        assert "pandas.Series.shout" in candidates
        del sys.modules["lender_pkg"]
        assert "pandas.Series.shout" not in _labels(library_patches._candidates())
        assert "lender_pkg" not in library_patches._last_walk
        del lender
        gc.collect()
        assert made() is None
        sys.modules["lender_pkg"] = types.ModuleType("lender_pkg")
        assert "pandas.Series.shout" in _labels(library_patches._candidates())
    finally:
        sys.modules.pop("lender_pkg", None)
        del pandas.Series.shout


def test_a_module_that_changes_its_globals_keeps_its_classes_read(monkeypatch, notebook_code):
    """Modules change their own globals as they run (caches, counters): the walk reads such a
    module's dict again, not its classes that did not change; a class of it that changed (and
    its subclasses, whose version the change resets), and a notebook function set on the
    module, are found."""
    if not cpython_versions.class_version(int) or not cpython_versions.dict_version({}):
        pytest.skip("the counters are read on CPython 3.11 to 3.13")
    import pandas.core.frame as frame

    rows, _ = notebook_code
    library_patches.find_patches(remembered=False)
    read = []
    original = library_patches._class_candidates
    monkeypatch.setattr(library_patches, "_class_candidates",
                        lambda module, package, cls: read.append(cls) or original(module, package, cls))
    try:
        frame._gkeresume_counter = 1  # the module's dict changes, none of its classes
        assert library_patches.find_patches(remembered=False) == []
        assert read == []
        frame.DataFrame.rows = rows
        frame.helper = rows
        assert _labels(library_patches.find_patches(remembered=False)) == {
            "pandas.core.frame.helper", "pandas.DataFrame.rows"}
        assert frame.DataFrame in read  # and its subclasses: a base's change reaches them
        assert all(issubclass(cls, frame.DataFrame) for cls in read)
    finally:
        del frame._gkeresume_counter, frame.helper, frame.DataFrame.rows


def test_the_sessions_own_modules_are_judged_again_when_sys_modules_changes(tmp_path):
    """``local_modules()`` answers again from what it found while ``sys.modules`` did not
    change (a checkpoint asks three times); a module of the session imported or removed since
    is seen at the next call, and what it returns is the caller's to change."""
    from kernel_hooks import local_modules

    source = tmp_path / "mycfg_walk.py"
    source.write_text("lr = 0.1\n")
    first = local_modules.local_modules()
    first["not a module"] = None  # the caller's copy
    assert "not a module" not in local_modules.local_modules()
    sys.path.insert(0, str(tmp_path))
    try:
        import mycfg_walk  # noqa: F401
        assert "mycfg_walk" in local_modules.local_modules()
        assert local_modules.is_local_module("mycfg_walk")
        del sys.modules["mycfg_walk"]
        assert "mycfg_walk" not in local_modules.local_modules()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mycfg_walk", None)
