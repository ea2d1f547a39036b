"""Replay picks the cells that rebuild missing variables, and what those cells needed."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kernel_hooks.replay import analyze_cell, plan_replay

NOTEBOOK = [
    "",                                                        # 0: IPython's In[0]
    "import numpy as np\nimport json",                        # 1
    "get_ipython().run_line_magic('matplotlib', 'inline')",   # 2
    "seed = 42\nrng = np.random.default_rng(seed)",           # 3
    "def scale(v):\n    return v * factor",                    # 4
    "factor = 3",                                              # 5
    "data = rng.normal(size=10)\nunrelated = json.dumps({})",  # 6
    "print(data.mean())",                                      # 7
    "data[0] = 0.0",                                           # 8
    "scaled = [scale(x) for x in data]",                       # 9
    "class Model:\n    bias = factor\n    def fit(self, xs):\n        self.w = np.mean(xs)",  # 10
    "model = Model()",                                         # 11
    "model.fit(scaled)",                                       # 12
    "seed = 7",                                                # 13
    "get_ipython().run_line_magic('pause', '')",               # 14
    "data = undefined_thing + 1",                              # 15: fails at run time, parses
]


def test_picks_the_defining_cells_their_inputs_and_in_place_changes():
    plan = plan_replay(NOTEBOOK, ["model"])
    # model <- 11 (Model() from 10), mutated by 12 (needs scaled 9 <- scale 4, factor 5,
    # data 6 + mutation 8 <- rng 3 <- np 1, seed 3), class body needs factor 5, method np 1.
    assert plan.cells == [1, 3, 4, 5, 6, 8, 9, 10, 11, 12]
    assert plan.sources[0] == NOTEBOOK[1]
    assert plan.unresolved == {}
    assert plan.rebinds == ["Model", "data", "factor", "json", "np", "rng", "scale", "scaled",
                            "seed", "unrelated"]


def test_a_simple_variable_needs_only_its_chain():
    assert plan_replay(NOTEBOOK, ["rng"]).cells == [1, 3]
    assert plan_replay(NOTEBOOK, ["seed"]).cells == [13]


def test_function_bodies_resolve_as_of_the_end():
    assert plan_replay(NOTEBOOK, ["scale"]).cells == [4, 5]


def test_unresolved_names_are_explained():
    plan = plan_replay([*NOTEBOOK, "result = helper(seed)"], ["result", "ghost"])
    assert plan.cells == [13, 16]
    assert plan.unresolved == {
        "ghost": "not bound by any cell in the input history",
        "helper": "not bound by any cell in the input history",
    }
    late = plan_replay(["", "y = x + 1", "x = 1"], ["y"])
    assert late.cells == [1]
    assert late.unresolved == {"x": "first bound in cell 2, after the cell that needs it"}


def test_unparsable_and_snapshot_magic_cells_are_never_chosen():
    history = ["", "x = 1", "x = (", "get_ipython().run_line_magic('resume', '')\ny = 2"]
    assert analyze_cell(history[2]) is None
    assert analyze_cell(history[3]).binds == set()
    plan = plan_replay(history, ["x", "y"])
    assert plan.cells == [1]
    assert plan.unparsed == [2]
    assert plan.unresolved == {"y": "not bound by any cell that parses (unparsed: [2])"}


def test_scopes_and_statements():
    facts = analyze_cell(
        "total = 0\n"
        "for i in range(n):\n    total += i\n"
        "with open(path) as fh:\n    text = fh.read()\n"
        "try:\n    v = int(text)\nexcept ValueError as err:\n    v = None\n"
        "evens = [k for k in items if k % step == 0]\n"
        "f = lambda a, b=default: a + b + offset\n"
        "if (m := len(text)) > limit:\n    cache['m'] = m\n"
        "match v:\n    case {'key': found, **rest}:\n        pass\n"
        "del cache['old']\n"
    )
    assert facts.binds == {"total", "i", "fh", "text", "v", "err", "evens", "f", "m", "found",
                           "rest"}
    assert facts.needs == {"n", "path", "items", "step", "default", "limit", "cache",
                           "range", "open", "int", "ValueError", "len"}  # builtins: dropped later
    assert facts.needs_later == {"offset"}
    assert facts.mutates == {"cache"}


def test_global_in_a_function_reads_the_module_name():
    facts = analyze_cell("def bump():\n    global counter\n    counter += step\n")
    assert facts.binds == {"bump"} and facts.needs == set()
    assert facts.needs_later == {"counter", "step"}


def test_raw_ipython_history_is_understood():
    history = ["", "import math\n%matplotlib inline", "!echo hi\nr = math.pi", "%checkpoint -n a",
               "%%time\nq = r * 2"]
    assert analyze_cell(history[3]).binds == set()  # a snapshot magic: never replayed
    plan = plan_replay(history, ["q"])
    assert plan.cells == [1, 2, 4] and plan.unparsed == []


SNIPPETS = [
    "a = 1", "a = b + 2", "b = 3", "b = a * 2", "c = [a, b]", "c.append(a)", "c[0] = b",
    "d = len(c) + a", "a += 1", "b += a", "def f():\n    return a + b", "e = f()",
    "g = lambda y: y + b", "e = g(a)", "for i in range(2):\n    a += i", "if a > 3:\n    b = 0",
    "import math\nd = math.floor(a / 2)", "h = [x + a for x in c]", "del c[0]",
    "class K:\n    z = b\n    def v(self):\n        return a", "e = K().v() + K.z",
    "try:\n    d = c[5]\nexcept IndexError:\n    d = -1", "with open(path) as fh:\n    b = 4",
    "path = '/dev/null'",
]


def run_cells(sources):
    namespace = {}
    for source in sources:
        exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=12), st.data())
def test_replaying_the_plan_rebuilds_the_same_value(cells, data):
    """Whatever the history, re-running only the chosen cells gives the value the full run gave
    (for code without aliasing or mutation through calls: the documented limits)."""
    kept: list[str] = []
    for cell in cells:  # keep the cells that run after the ones kept (a user fixes the rest)
        try:
            full = run_cells([*kept, cell])
        except Exception:
            continue
        kept.append(cell)
    assume(kept)
    cells, full = kept, run_cells(kept)
    names = sorted(n for n in "abcdeh" if n in full)
    assume(names)
    target = data.draw(st.sampled_from(names))
    history = ["", *cells]
    plan = plan_replay(history, [target])
    assert plan.unresolved == {}
    assert plan.cells == sorted(set(plan.cells)) and plan.sources == [history[c] for c in plan.cells]
    assert run_cells(plan.sources)[target] == full[target]


def test_a_function_reads_its_globals_where_it_is_called():
    history = ["", "a = 1", "b = 3", "def f():\n    return a + b", "e = f()", "a = 5"]
    assert plan_replay(history, ["e"]).cells == [1, 2, 3, 4]
    assert plan_replay(history, ["f"]).cells == [2, 3, 5]  # called after the replay: a is 5


def test_a_binding_that_may_not_run_keeps_the_one_before():
    history = ["", "a = 1", "if a > 5:\n    a = 9", "b = a"]
    assert plan_replay(history, ["b"]).cells == [1, 2, 3]
    assert analyze_cell(history[2]).binds_always == set()


def test_replay_runs_from_the_python_api_and_binds_to_the_namespace():
    import kernel_hooks

    history = ["", "SCALE = 2", "def scaled(v):\n    return v * SCALE",
               "class Box:\n    def get(self):\n        return scaled(1)", "data = [scaled(3)]",
               "boom = 1 / 0"]
    namespace = {"SCALE": 2, "__name__": "__main__"}
    planned = []
    result = kernel_hooks.replay(["data", "scaled", "Box"], namespace=namespace, history=history,
                                 on_plan=planned.append)
    assert planned[0].cells == result.cells == [1, 2, 3, 4]
    assert result.back == ["data", "scaled", "Box"] and result.failed is None
    assert namespace["data"] == [6]
    namespace["SCALE"] = 10  # redefining a global after the replay takes effect
    assert namespace["scaled"](1) == 10 and namespace["Box"]().get() == 10
    assert namespace["scaled"].__globals__ is namespace

    failed = kernel_hooks.replay(["boom"], namespace={}, history=history)
    assert failed.cells == [5] and failed.back == []
    assert failed.failed == "In[5] failed: ZeroDivisionError: division by zero"
