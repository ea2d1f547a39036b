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
