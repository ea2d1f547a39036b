"""Objects pickle refuses although all they hold is what made them come back made again
(``kernel_hooks.remade``): a ``struct.Struct``, a ``random.SystemRandom``, a Pillow drawing
context on its image, a regular expression match. Each was left out with pickle's error, the
session ``partial`` (found by a probe). A drawing context whose image no longer shows its pixels
is named, and so are worker pools, with a reason a user can act on (a ``ProcessPoolExecutor`` was
named with pickle's "Pickling an AuthenticationString object is disallowed"). Instances of classes
with a ``__new__`` of their own that wants other arguments than pickle passes (``Point(x, y)``
over a tuple) were saved and then not restored: they come back, and so do subclasses of containers
whose ``__init__`` takes other arguments than their base's ``__reduce__`` gives (``Vocab(tokens)``
over an ``OrderedDict``), with the attributes set on them (a ``Counter``'s reduction leaves them
out: lost silently). In process, on a local store."""

from __future__ import annotations

import collections
import random
import struct
from concurrent.futures import ProcessPoolExecutor
from http import HTTPStatus
from multiprocessing.pool import ThreadPool

from PIL import Image, ImageDraw

import kernel_hooks


class Dice(random.SystemRandom):
    """A notebook's subclass, with an attribute of its own."""


def _resumed(namespace: dict, tmp_path) -> tuple[dict, object, object]:
    root = str(tmp_path / "store")
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    restored: dict = {}
    report = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    return restored, result, report


def test_a_struct_and_a_system_random_come_back(tmp_path):
    dice = Dice()
    dice.sides = 6
    restored, result, report = _resumed(
        {"header": struct.Struct("<if3s"), "dice": dice, "entropy": random.SystemRandom()},
        tmp_path)
    assert result.skipped == [] and report.verdict["level"] == "exact", report.verdict
    assert restored["header"].format == "<if3s" and restored["header"].size == 11
    assert restored["header"].unpack(struct.pack("<if3s", 7, 0.5, b"abc")) == (7, 0.5, b"abc")
    assert type(restored["dice"]) is Dice and restored["dice"].sides == 6
    assert 1 <= restored["dice"].randint(1, 6) <= 6
    assert 0 <= restored["entropy"].random() < 1


def test_a_drawing_context_draws_on_its_restored_image(tmp_path):
    image = Image.new("RGB", (8, 8), "red")
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, 0, 3, 3], fill="blue")
    draw.fontmode = "1"
    restored, result, report = _resumed({"image": image, "draw": draw}, tmp_path)
    assert result.skipped == [] and report.verdict["level"] == "exact", report.verdict
    again = restored["draw"]
    assert again._image is restored["image"] and again.fontmode == "1"
    again.line([0, 7, 7, 7], fill="green")  # drawn into the image the session holds
    assert restored["image"].getpixel((1, 1)) == (0, 0, 255)
    assert restored["image"].getpixel((5, 7)) == (0, 128, 0)


def test_a_drawing_context_its_image_left_is_named(tmp_path):
    image = Image.new("RGB", (16, 16))
    draw = ImageDraw.Draw(image)
    image.thumbnail((4, 4))  # new pixels: the context still draws into the old ones
    restored, _, report = _resumed({"image": image, "draw": draw}, tmp_path)
    assert report.verdict["level"] == "partial", report.verdict
    assert "a drawing context on pixels its image no longer shows" in str(report.verdict["reasons"])
    assert restored["image"].size == (4, 4)


def test_worker_pools_are_named_with_what_to_do(tmp_path):
    processes, threads = ProcessPoolExecutor(1), ThreadPool(1)
    try:
        _, result, _ = _resumed({"processes": processes, "threads": threads, "kept": 1}, tmp_path)
    finally:
        processes.shutdown()
        threads.terminate()
    named = {s.name: s.reason for s in result.skipped if s.name in ("processes", "threads")}
    assert named == dict.fromkeys(
        ("processes", "threads"),
        "a worker pool: its workers stay on this pod (create it again after the resume)"), named


class Point(tuple):
    def __new__(cls, x: int, y: int):
        return super().__new__(cls, (x, y))


class Celsius(float):
    def __new__(cls, value: float, unit: str):
        made = super().__new__(cls, value)
        made.unit = unit
        return made


class Needs:
    def __new__(cls, need: int):
        made = super().__new__(cls)
        made.need = need
        return made


class Cached:
    """A ``__new__`` that pickle's call still suits: it keeps being called (one instance)."""

    made: Cached | None = None

    def __new__(cls):
        if cls.made is None:
            cls.made = super().__new__(cls)
        return cls.made


def test_instances_of_a_class_with_its_own_new_come_back(tmp_path):
    namespace = {"point": Point(1, 2), "celsius": Celsius(3.5, "C"), "needs": Needs(5),
                 "cached": Cached(), "status": HTTPStatus.OK}
    restored, result, report = _resumed(namespace, tmp_path)
    assert result.skipped == [] and report.verdict["level"] == "exact", report.verdict
    assert type(restored["point"]) is Point and restored["point"] == (1, 2)
    assert restored["celsius"] == 3.5 and restored["celsius"].unit == "C"
    assert restored["needs"].need == 5
    assert restored["cached"] is Cached.made
    assert restored["status"] is HTTPStatus.OK  # an enum member: the very member, untouched


class Vocab(collections.OrderedDict):
    def __init__(self, tokens: list[str]):
        super().__init__((token, index) for index, token in enumerate(tokens))


class Counts(collections.Counter):
    def __init__(self, text: str, min_count: int):
        super().__init__(text.split())
        self.min_count = min_count


class History(collections.deque):
    def __init__(self, size: int):
        super().__init__(maxlen=size)


class Tree(collections.defaultdict):
    def __init__(self):
        super().__init__(Tree)


class Tally(collections.Counter):
    """No ``__init__`` of its own: its attributes were the loss."""


def test_container_subclasses_come_back_with_their_attributes(tmp_path):
    history = History(3)
    history.extend([1, 2, 3, 4])
    tree = Tree()
    tree["a"]["b"] = 1
    tree.label = "root"
    tally = Tally("a b a".split())
    tally.itos = ["a", "b"]
    namespace = {"vocab": Vocab(["a", "b"]), "counts": Counts("a b a", 2), "history": history,
                 "tree": tree, "tally": tally}
    restored, result, report = _resumed(namespace, tmp_path)
    assert result.skipped == [] and report.verdict["level"] == "exact", report.verdict
    assert type(restored["vocab"]) is Vocab and list(restored["vocab"].items()) == [("a", 0),
                                                                                  ("b", 1)]
    assert restored["counts"] == {"a": 2, "b": 1} and restored["counts"].min_count == 2
    assert list(restored["history"]) == [2, 3, 4] and restored["history"].maxlen == 3
    assert type(restored["tree"]["a"]) is Tree and restored["tree"]["a"]["b"] == 1
    assert restored["tree"].label == "root" and type(restored["tree"]["new"]) is Tree
    assert restored["tally"] == {"a": 2, "b": 1} and restored["tally"].itos == ["a", "b"]


class Registered(tuple):
    """A class the session taught pickle itself (``copyreg.pickle``): its reducer is used."""

    def __new__(cls, x: int, y: int):
        return super().__new__(cls, (x, y))


def _registered(value: Registered) -> tuple:
    return Registered, (value[0] * 10, value[1] * 10)  # tells the copy by its values


def test_a_reducer_the_session_registered_goes_first(tmp_path):
    import copyreg

    copyreg.pickle(Registered, _registered)
    try:
        restored, result, _ = _resumed({"pair": Registered(1, 2)}, tmp_path)
    finally:
        del copyreg.dispatch_table[Registered]
    assert result.skipped == [] and restored["pair"] == (10, 20)


def test_a_regular_expression_match_comes_back(tmp_path):
    """``m = re.search(...)`` kept for the next cell: pickle refuses a match ("cannot pickle
    're.Match' object"), so it was named and the session ``partial`` (found by a probe). A
    match is what its pattern finds in its string: it is made again by the call that gives the
    same groups at the same places (``search``, ``match`` or ``fullmatch`` from its ``pos``,
    or from its start: the n-th match of a ``finditer``). One that no call makes again is
    still named."""
    import re

    text = "id=17 name=ada id=42"
    pattern = re.compile(r"id=(?P<num>\d+)")
    namespace = {
        "found": re.search(r"name=(\w+)", text),
        "anchored": pattern.match(text),
        "whole": re.fullmatch(r"(\w+)=(\d+)", "id=17"),
        "second": list(pattern.finditer(text))[1],
        "within": pattern.search(text, 3, 20),
        "nothing": re.match("x", text),
    }
    restored, result, report = _resumed(namespace, tmp_path)
    assert not result.skipped and report.verdict["level"] == "exact", report.verdict
    for name, match in namespace.items():
        again = restored[name]
        if match is None:
            assert again is None
            continue
        assert type(again) is re.Match and again.regs == match.regs, name
        assert (again.string, again.re.pattern, again.endpos) == (
            match.string, match.re.pattern, match.endpos), name
        assert again.groupdict() == match.groupdict() and again.lastgroup == match.lastgroup
    assert restored["found"].group(1) == "ada" and restored["second"].group("num") == "42"
    assert restored["within"].pos == 3 and restored["anchored"].pos == 0
