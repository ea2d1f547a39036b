"""torch.compile across a cut (issue 28 item 4): a session that had imported setuptools is
resumed in a fresh kernel, and inductor (CPU) compiles there.

setuptools >= 71 appends ``setuptools/_vendor`` to ``sys.path`` when imported
(setuptools/__init__.py, ``sys.path.extend(... 'setuptools', '_vendor' ...)``); the vendored
``packaging`` there was carried as a package of the session and installed over the
environment's at resume, and the first compile raised ``BackendCompilerFailed ... cannot import
name '_TrimmedRelease' from 'packaging.version'`` after setuptools' "Distutils was imported before
Setuptools" warning (_distutils_hack/__init__.py). The resumed kernel runs in a throwaway
environment (``throwaway_environment``): whatever a resume would install lands there, never in
the test environment. An ``OptimizedModule`` (torch/_dynamo/eval_frame.py) pickles as its module
and comes back callable. A compiled function (``_TorchDynamoContext.__call__``'s closure, named
as the user's function by ``functools.wraps``) held dynamo's config module
(torch/utils/_config_module.py ``ConfigModuleInstance``) and was named as not saved: it comes
back compiled, with its original function, and compiles at its first call.
"""

from __future__ import annotations

from fixtures_kernels import throwaway_environment

SESSION = r"""
import json, setuptools, torch
torch.manual_seed(0)
m = torch.compile(torch.nn.Linear(3, 2))
def g(x):
    return x.cos() * 2
f = torch.compile(g)
x = torch.linspace(-1, 1, 12).reshape(4, 3)
with torch.no_grad():
    print(json.dumps([m(x).tolist(), f(x).tolist()]))
"""

AFTER = r"""
import json, sys, torch
h = torch.compile(lambda t: t.sin() + 1)  # a compile in the resumed kernel: inductor runs
with torch.no_grad():
    print(json.dumps([type(m).__name__, m(x).tolist(), h(x).tolist(),
                      "setuptools" in sys.modules, f(x).tolist(),
                      f._torchdynamo_orig_callable is g]))
"""


def test_a_session_that_imported_setuptools_resumes_and_torch_compile_works(
        tmp_path, monkeypatch, start_kernel):
    kernels = tmp_path / "jupyter" / "kernels"
    monkeypatch.setenv("JUPYTER_PATH", str(kernels.parent))
    throwaway_environment(tmp_path / "env-b", kernels)

    kernel = start_kernel()
    before = kernel.run_json(SESSION)
    report = kernel.run("%checkpoint")
    assert "not saved" not in report, report
    kernel.kill()

    fresh = start_kernel(kernel_name="env-b")
    fresh.run("%load_ext kernel_hooks")
    resumed = fresh.run("%resume")
    assert "package:" not in resumed  # setuptools' vendored copies are setuptools' own files
    assert "(exact)" in resumed and "not restored" not in resumed, resumed
    out = fresh.run(AFTER)
    assert "Distutils was imported before Setuptools" not in out
    kind, again, compiled, had_setuptools, function_again, same_original = json_line(out)
    assert kind == "OptimizedModule" and again == before[0]
    assert compiled == json_line(fresh.run("print(json.dumps((x.sin() + 1).tolist()))"))
    assert had_setuptools and function_again == before[1] and same_original


def json_line(text: str) -> object:
    import json

    return json.loads(text.strip().splitlines()[-1])


TRAINING = r"""
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.Adam(model.parameters())

def train(mod, data):
    opt.zero_grad(True)
    loss = torch.nn.CrossEntropyLoss()(mod(data[0]), data[1])
    loss.backward()
    opt.step()
    return loss

def batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(16, 8, generator=g), torch.randint(4, (16,), generator=g)

train_opt = torch.compile(train, backend="eager")
losses = [round(train_opt(model, batch(i)).item(), 6) for i in range(2)]
leaked = sorted(n for n in globals() if n.startswith("__builtins_dict__"))
print(len(leaked) > 0)
"""
GOES_ON = ("import json\n"
           "more = [round(train_opt(model, batch(i)).item(), 6) for i in range(2, 4)]\n"
           "h = torch.compile(lambda t: t.sin() + 1, backend='eager')\n"
           "print(json.dumps([losses, more, h(torch.zeros(2)).tolist()]))")


def test_names_torch_compile_left_in_the_namespace_stay_behind(start_kernel):
    """torch.compile puts globals into the namespace of the code it compiles, named by one
    process-wide counter (torch/_dynamo/bytecode_transformation.py ``unique_id``:
    ``__builtins_dict___3``, ``__compiled_fn_7_<uuid>``, ``__resume_at_52_10``), and refuses to
    install a name that is there already (torch/_dynamo/utils.py ``CleanupHook.create``: "Name
    ... already exists in scope"). Most are removed with their code (``CleanupManager``), but
    graph breaks in an optimizer step leave ``__builtins_dict___N`` behind for good. Those were
    saved as the user's and put back; the resumed kernel's counter starts at 0 again, so the
    next compile, of the training step or of anything else, raised that AssertionError while
    the verdict said ``exact`` (the torch.compile tutorial, cut after its compiled training)."""
    kernel = start_kernel()
    assert kernel.run(TRAINING).endswith("True\n")  # the names this is about are there
    report = kernel.run("%checkpoint")
    assert "__builtins_dict__" not in report
    expected = kernel.run(GOES_ON)
    kernel.kill()
    fresh = start_kernel()
    resumed = fresh.run("%resume")
    assert "(exact)" in resumed and "__builtins_dict__" not in resumed, resumed
    # the same losses; the resumed kernel compiles again, and torch's logging says so once
    assert fresh.run(GOES_ON).splitlines()[-1] == expected.splitlines()[-1]


def test_a_module_compiled_in_place_comes_back_compiled(tmp_path):
    """``model.compile()`` (torch/nn/modules/module.py ``Module.compile``) keeps the compiled
    call in the module's ``_compiled_call_impl``, which ``Module.__getstate__`` drops: the
    module came back running eagerly under ``exact``, as ``torch.save`` brings it back. It
    comes back compiled with the same arguments, and compiles at its first call: the
    session's backend sees the graph again."""
    import torch
    from fixtures_kernels import resumed_in_process

    namespace = {"__name__": "__main__"}
    exec("import torch\n"
         "graphs = []\n"
         "def backend(gm, inputs):\n"
         "    graphs.append(len(gm.graph.nodes))\n"
         "    return gm.forward\n"
         "class Net(torch.nn.Linear):\n"
         "    def forward(self, x):\n"
         "        return super().forward(x).relu()\n"
         "torch.manual_seed(0)\n"
         "model = Net(3, 2)\n"
         "model.compile(backend=backend, dynamic=False)\n"
         "x = torch.randn(4, 3)\n"
         "y = model(x).detach()\n", namespace)
    assert namespace["graphs"]
    restored = resumed_in_process(namespace, tmp_path)
    torch._dynamo.reset()  # this process compiled it already: as a fresh kernel would
    model, graphs = restored["model"], restored["graphs"]
    seen = len(graphs)
    assert torch.equal(model(restored["x"]), namespace["y"])
    assert len(graphs) == seen + 1  # compiled again, by the session's backend
    assert model._compiled_call_impl._torchdynamo_orig_callable.__self__ is model
