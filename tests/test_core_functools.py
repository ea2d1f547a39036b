"""functools' decorators on the notebook's own code come back: a ``singledispatch`` function
(its closure holds a ``WeakKeyDictionary`` dispatch cache, which does not pickle: the name was
lost) and a class with a ``cached_property`` (before Python 3.12 the property holds an ``RLock``:
the class came back with a placeholder, and the resume was partial). Namedtuple classes of the
notebook come back without a false alarm: their ``__new__`` says module ``namedtuple_Point``
(collections/__init__.py evaluates it in such a namespace), which the resume called not
importable, so every notebook with one was partial."""

from __future__ import annotations

import pickle

from kernel_hooks.graph import write_graph
from kernel_hooks.storages import StorageCollector

SESSION = r'''
import functools, json

@functools.singledispatch
def describe(x):
    return "thing"

@describe.register(int)
def _(x):
    return f"int {x}"

class Dataset:
    def __init__(self, n):
        self.n = n
        self.computed = 0

    @functools.cached_property
    def size(self):
        self.computed += 1
        return self.n * 2

data = Dataset(4)
data.size
first = functools.partial(describe, 3)

import collections, typing
Point = collections.namedtuple("Point", "x y")

class Pair(typing.NamedTuple):
    left: int
    right: int = 2

corner = (Point(1, 2), Pair(3))
'''

OBSERVE = r'''
print(json.dumps([describe(1), describe("a"), first(), data.size, data.computed,
                  Dataset(5).size, type(Dataset.__dict__["size"]).__name__,
                  corner[0].y + corner[1].right, Point(5, 6).x]))
'''


def test_singledispatch_cached_property_and_namedtuples_come_back(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    before = a.run_json(OBSERVE)
    assert before == ["int 1", "thing", "int 3", 8, 1, 10, "cached_property", 4, 5]
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0] and "not restored" not in out, out
    assert b.run_json(OBSERVE) == before  # the cached value is not computed again
    b.run("@describe.register(float)\ndef _(x):\n    return 'float'")
    assert b.run_json("print(json.dumps(describe(1.5)))") == "float"


def test_a_cache_that_comes_back_empty_is_named(start_kernel):
    """``functools.lru_cache`` keeps its results in C with no API to read them, so a notebook's
    cached function comes back with an empty cache. That was silent while the verdict said
    ``exact``: a ``@cache def get_model()`` then builds a new model at its next call instead of
    giving the one the session trained. A cache that held results is named; an empty one, and
    the function itself, come back as they were."""
    a = start_kernel()
    a.run("import functools, json\n"
          "@functools.cache\ndef get_model():\n    return {'weights': [0.0]}\n"
          "model = get_model()\nmodel['weights'][0] = 0.5  # trained\n"
          "@functools.lru_cache(maxsize=8)\ndef unused(x):\n    return x\n")
    out = a.run("%checkpoint")
    assert "get_model: its cache of 1 result comes back empty" in out, out
    assert "unused" not in out, out
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(partial)" in out.splitlines()[0], out
    assert "functools.lru_cache (get_model: its cache of 1 result comes back empty" in out, out
    assert b.run_json("print(json.dumps([model['weights'], get_model()['weights'], unused(3),"
                      " get_model.cache_parameters()]))") == [
        [0.5], [0.0], 3, {"maxsize": None, "typed": False}]


def test_a_librarys_cached_function_goes_by_reference_and_is_not_named():
    """A library's ``functools.cache`` function reached from the session (pandas' date axis
    keeps ``converter._daily_finder`` in its locator: ``ax = df["b"].plot()`` on a time index)
    was pickled by value, as a notebook function is, and its filled cache named: every notebook
    with such a plot was ``partial`` (found by a probe through ``scripts/cut_check.py``). The
    module attribute is the cache itself, so it goes by reference: the resumed process has the
    library's own, as any process does. Here with the standard library's
    ``fnmatch._compile_pattern`` (an ``lru_cache``, filled by ``fnmatch.fnmatch``)."""
    import fnmatch

    fnmatch.fnmatch("notes.txt", "*.txt")
    assert fnmatch._compile_pattern.cache_info().currsize > 0
    graph, records, _, failed = write_graph([("matcher", fnmatch._compile_pattern)],
                                            StorageCollector)
    assert not failed and records[0].note.uncaptured == [], records[0].note
    assert pickle.loads(graph) is fnmatch._compile_pattern  # a reference: no rebuild needed
