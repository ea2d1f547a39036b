"""Attributes the cells set on objects of library classes whose own pickling leaves them out
(``kernel_hooks.object_attributes``): ``df.name = "train"`` and ``series.unit``, ``index.tag``,
a PIL image's ``label`` were gone after a resume while the verdict said ``exact`` (found by a
probe: pandas' and PIL's ``__getstate__`` keep what the class knows)."""

from __future__ import annotations

from fixtures_kernels import resumed_elsewhere

SESSION = r"""
import json
import pandas as pd
from PIL import Image

df = pd.DataFrame({"a": [1, 2]})
df.name = "train"
frames = {"valid": pd.Series([1.0])}
frames["valid"].unit = "kg"   # not a chain of names: the text does not say it
index = pd.Index([1, 2])
index.tag = {"split": "valid"}
img = Image.new("RGB", (2, 2))
img.label = 3

def tag(frame):
    frame.source = "tagged in a function"  # the parameter, not a name of the namespace

tag(df)

class Cached:
    def __init__(self):
        self.kept, self.scratch = 1, None

    def __getstate__(self):  # the notebook's own class drops scratch on purpose
        return {"kept": self.kept}

cached = Cached()
cached.scratch = "rebuilt when needed"
client = pd.DataFrame()
client.api_key = "sk-" + "a" * 40
"""
OBSERVE = r"""
print(json.dumps([getattr(df, "name", None), getattr(index, "tag", None),
                  getattr(img, "label", None), getattr(cached, "scratch", None),
                  getattr(client, "api_key", None), df.a.tolist(),
                  getattr(frames["valid"], "unit", None), getattr(df, "source", None)]))
"""


def test_attributes_the_cells_set_on_library_objects_come_back(start_kernel):
    """What a cell's text assigns to a name's object comes back with it (the object is the
    variable's: one graph); the notebook's own class pickles as it says; a credential-looking
    value is named, not saved. An attribute set where the text does not name the object through
    names (a subscript, a function's parameter) is still lost unnamed: nothing tells it from one
    the class leaves out on purpose (noted in docs/core.md)."""
    a = start_kernel()
    a.run(SESSION)
    assert a.run_json(OBSERVE) == ["train", {"split": "valid"}, 3, "rebuilt when needed",
                                   "sk-" + "a" * 40, [1, 2], "kg", "tagged in a function"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "attributes set on objects" in out, out
    assert "client.api_key (looks like a credential: not saved)" in out, out
    assert b.run_json(OBSERVE) == ["train", {"split": "valid"}, 3, None, None, [1, 2], None, None]


COLLATOR = r"""
import json
from types import SimpleNamespace
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast
words = "[PAD] [UNK] [MASK] a b c d e f g h".split()
tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tk.pre_tokenizer = pre_tokenizers.Whitespace()
tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]",
                              mask_token="[MASK]")
batch = [{"input_ids": list(range(3, 11))} for _ in range(3)]
coll = DataCollatorForLanguageModeling(tok, mlm_probability=0.4, seed=42)
held = SimpleNamespace(data_collator=DataCollatorForLanguageModeling(tok, seed=7))  # a Trainer
masked = lambda: [coll(batch)["input_ids"].tolist(), held.data_collator(batch)["input_ids"].tolist()]
first = masked()
"""
MASKED = "print(json.dumps(masked()))"


def test_a_collator_seeded_once_goes_on_with_its_generator(start_kernel):
    """transformers' ``DataCollatorForLanguageModeling(seed=42)`` remembers the process that
    made its generator (``_generator_pid``) and makes it again from the seed in another one (a
    DataLoader worker). After a resume every process id differs: the masking started over from
    the seed, under an exact verdict (a helper's probe). A resumed kernel is the session's
    process: the ids such objects remember, on a variable or an object a variable holds (a
    Trainer's collator), are the resumed kernel's."""
    whole = start_kernel()
    whole.run(COLLATOR)
    expected = whole.run_json(MASKED)
    a = start_kernel()
    a.run(COLLATOR)
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "process ids remembered" in out, out
    assert b.run_json(MASKED) == expected
