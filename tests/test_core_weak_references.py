"""Weak references across a cut (``kernel_hooks.weak_references``): a session that keeps a
registry of live objects is checkpointed, killed and resumed in a fresh kernel.

``weakref.ref``, ``WeakMethod``, ``WeakValueDictionary`` and ``WeakKeyDictionary`` do not pickle
(Modules/_weakref / Objects/weakrefobject.c define no reduction: ``TypeError: cannot pickle
'weakref.ReferenceType' object``), so every name holding one was not restored. A
``weakref.proxy`` forwards ``__reduce_ex__`` to its referent, so it pickled silently as a copy:
a change made through the original no longer showed through the proxy, and the verdict said
``exact``; a ``weakref.finalize`` came back dead (its registration is class state), so its
function never ran. Each comes back referring to the very object the rest of the namespace holds, with
its callback. A referent that nothing else brought back dies at the resume: that is named, never
silent.
"""

from __future__ import annotations

import re

from fixtures_kernels import resumed_elsewhere

SESSION = r"""
import gc, json, weakref

class Layer:
    def __init__(self, name):
        self.name = name
    def describe(self):
        return f"layer {self.name}"

class Registry(weakref.WeakValueDictionary):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner

fired = []
def forget(reference):
    fired.append("forgot")

encoder, decoder = Layer("encoder"), Layer("decoder")
registry = Registry("trainer")
registry["encoder"], registry["decoder"] = encoder, decoder
sizes = weakref.WeakKeyDictionary({encoder: 3, decoder: 5})
active = weakref.WeakSet([encoder])
watch = weakref.ref(decoder, forget)
view = weakref.proxy(encoder)
describe = weakref.WeakMethod(decoder.describe)
already_gone = weakref.ref(Layer("temporary"))
dead_proxy, dead_method = weakref.proxy(Layer("gone")), weakref.WeakMethod(Layer("gone").describe)
cleanup = weakref.finalize(decoder, fired.append, "finalized")
"""

STATE = r"""
print(json.dumps([sorted(registry), registry["encoder"] is encoder, registry.owner,
                  type(registry).__name__, sizes[decoder], list(active) == [encoder],
                  watch() is decoder, describe()(), already_gone() is None, cleanup.alive,
                  type(dead_proxy).__name__, type(dead_method).__name__, dead_method() is None]))
"""


def test_weak_references_come_back_to_the_objects_the_namespace_holds(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    expected = a.run_json(STATE)
    assert expected == [["decoder", "encoder"], True, "trainer", "Registry", 5, True, True,
                        "layer decoder", True, True, "ProxyType", "WeakMethod", True]
    report = a.run("%checkpoint")
    assert "not saved" not in report, report
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0], out
    assert b.run_json(STATE) == expected
    # the proxy is the encoder's, not a copy: a change shows through it
    assert b.run("encoder.name = 'renamed'\nprint(view.name)").strip() == "renamed"
    # the callback came back, and the references are weak still
    after = b.run_json("del decoder\ngc.collect()\n"
                       "print(json.dumps([sorted(fired), sorted(registry), len(sizes),"
                       " watch() is None, describe() is None, cleanup.alive]))")
    assert after == [["finalized", "forgot"], ["encoder"], 1, True, True, False]


def _held_by_json(start_kernel, holding: str):
    """A ``Model`` held by ``json._kept`` (set by ``holding``) and weak references to it, resumed
    in a fresh kernel: that kernel and the resume's report."""
    a = start_kernel()
    a.run(f"import json, weakref\nclass Model: pass\n{holding}\n"
          "latest = weakref.ref(json._kept)\n"
          "cache = weakref.WeakValueDictionary({'model': json._kept})")
    return resumed_elsewhere(a, start_kernel)


def test_a_referent_nothing_else_brings_back_is_named(start_kernel):
    """Held on the old pod only by something the snapshot does not carry (here an attribute a
    call set on a library module: ``library_values`` reads assignments in the cells' text, not
    ``setattr`` calls), the referent dies at the resume: the reference comes back dead, and the
    resume names it instead of saying ``exact``."""
    b, out = _held_by_json(start_kernel, "setattr(json, '_kept', Model())")
    assert "(partial)" in out.splitlines()[0], out
    assert re.search(r"latest: its weakref\.ReferenceType to a __main__\.Model came back dead: "
                     r"nothing else held the __main__\.Model after the resume", out), out
    assert re.search(r"cache: its weakref\.WeakValueDictionary lost 1 of its 1 entries "
                     r"\(__main__\.Model\)", out), out
    assert b.run("print(latest(), len(cache))").strip() == "None 0"


def test_a_referent_a_cell_set_on_a_library_comes_back_alive(start_kernel):
    """Assigned in a cell to a library module's attribute, the referent is carried with that
    value (``library_values``) as the same object: the references come back alive to it."""
    b, out = _held_by_json(start_kernel, "json._kept = Model()")
    assert "(exact)" in out.splitlines()[0], out
    assert b.run("print(latest() is json._kept is cache['model'], type(json._kept).__name__)"
                 ).strip() == "True Model"
