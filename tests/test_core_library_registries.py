"""Registries of libraries that hold the notebook's classes and functions
(``kernel_hooks.library_registries``), carried across a cut.

A notebook registers its own classes with a library by calling it: ``AutoConfig.register`` and
``AutoModel.register`` (transformers/models/auto/configuration_auto.py and auto_factory.py: the
module-level ``CONFIG_MAPPING`` and ``MODEL_MAPPING`` keep them in ``_extra_content``),
``torch.serialization.add_safe_globals`` (torch/_weights_only_unpickler.py,
``_marked_safe_globals_set``), ``torch.utils._pytree.register_pytree_node`` (``SUPPORTED_NODES``),
``pandas.api.extensions.register_extension_dtype`` (pandas/core/dtypes/base.py, ``_registry.dtypes``).
A fresh process has none of them, so after a resume ``AutoModel.from_config`` raised
"Unrecognized model identifier", ``torch.load(weights_only=True)`` refused the class, pytree
took the class for a leaf, all under an ``exact`` verdict (found by probes). A colormap the
notebook registered (``matplotlib.colormaps.register``: a library object, not the notebook's
class) has its own entry, restored before the rcParams that may name it. Kernel A registers and
observes, checkpoints and dies; kernel B resumes and observes the same."""

from __future__ import annotations

import collections

from fixtures_kernels import resumed_elsewhere

from kernel_hooks import library_registries

SESSION = r"""
import torch
import torch.utils._pytree as pytree
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

class TinyConfig(PretrainedConfig):
    model_type = "tiny-notebook"

class TinyModel(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.layer = torch.nn.Linear(2, 2)

AutoConfig.register("tiny-notebook", TinyConfig)
AutoModel.register(TinyConfig, TinyModel)

class Box:
    def __init__(self, value):
        self.value = value

torch.serialization.add_safe_globals([Box])
torch.save({"box": Box(3)}, "box.pt")

class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second

pytree.register_pytree_node(Pair, lambda p: ([p.first, p.second], None),
                            lambda leaves, context: Pair(*leaves))

@torch.compile(backend="eager")
def doubled(x):
    return x * 2

doubled(torch.ones(2))

import matplotlib
from matplotlib.colors import ListedColormap
matplotlib.colormaps.register(ListedColormap(["red", "blue"], name="notebook-map"))
matplotlib.rcParams["image.cmap"] = "notebook-map"
"""
OBSERVE = r"""
import json, torch
import torch.utils._pytree as pytree
from transformers import AutoConfig, AutoModel

print(json.dumps([
    type(AutoConfig.for_model("tiny-notebook")).__name__,
    type(AutoModel.from_config(TinyConfig())).__name__,
    torch.load("box.pt", weights_only=True)["box"].value,
    pytree.tree_flatten(Pair(1, 2))[0],
    doubled(torch.ones(2)).tolist(),
    __import__("matplotlib").colormaps["notebook-map"].N,
    __import__("matplotlib.pyplot").pyplot.get_cmap().name,
]))
"""


def test_what_the_notebook_registered_with_libraries_comes_back(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    expected = a.run_json(OBSERVE)
    assert expected == ["TinyConfig", "TinyModel", 3, [1, 2], [2.0, 2.0], 2, "notebook-map"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert "library registries" in out and "matplotlib colormaps" in out, out
    assert b.run_json(OBSERVE) == expected


def test_a_registry_this_kernel_lacks_is_named():
    """Where the library the resume imports has no such registry any more (another version),
    the entries are named with the registry, not dropped; the others are restored."""
    import json

    kept, ordered = {}, collections.OrderedDict()
    json.REGISTRY_OF_THIS_TEST, json.ORDERED_OF_THIS_TEST = kept, ordered
    try:
        why = library_registries.restore_registries([
            ("json", ("NO_SUCH_REGISTRY",), "dict", [("mine", Plugin)]),
            ("json", ("REGISTRY_OF_THIS_TEST",), "dict", [("mine", Plugin)]),
            ("json", ("ORDERED_OF_THIS_TEST",), "dict", [(Plugin, "plugin")]),
        ])
    finally:
        del json.REGISTRY_OF_THIS_TEST, json.ORDERED_OF_THIS_TEST
    assert why == "not restored: json.NO_SUCH_REGISTRY (1 entries: no such registry here)"
    assert kept == {"mine": Plugin} and ordered == {Plugin: "plugin"}


class Plugin:
    pass
