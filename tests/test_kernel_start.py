"""Loading the extension keeps a kernel's start light (issue 31 item 1).

Installing the package makes every IPython kernel of the environment load ``kernel_hooks`` at
start (``etc/ipython/ipython_kernel_config.json``), also for users who never pause. The load may
import only what it records: no store, nothing of the GCS stack (aiohttp, gcsfs, google), no
torch or numpy, no hashing or pickling library; the first checkpoint imports them (fsspec and
the GCS stack only for a gs:// store: a checkpoint to a local one never loads them). Pinned as
modules (``sys.modules`` in real kernels, with the extension and without it:
``--IPKernelApp.extensions=[]``), not as a time: benchmarks/kernel_start.py times it.
"""

from __future__ import annotations

import sys

#: Third-party and checkpoint machinery that a kernel's start must not import.
NOT_AT_START = ("aiohttp", "gcsfs", "google", "fsspec", "torch", "numpy", "blake3", "xxhash",
                "cloudpickle", "crc32c", "yarl")
#: Our modules that only a checkpoint, a resume or a listing needs.
CHECKPOINT_MACHINERY = (
    "kernel_hooks.api", "kernel_hooks.capture", "kernel_hooks.restore", "kernel_hooks.blobwriter",
    "kernel_hooks.loader", "kernel_hooks.graph", "kernel_hooks.cuda_engine",
    "jupyter_gkeresume.snapshot.store", "jupyter_gkeresume.snapshot.backends",
    "jupyter_gkeresume.snapshot.gcs_api", "jupyter_gkeresume.snapshot.signing",
    "jupyter_gkeresume.snapshot.catalog", "jupyter_gkeresume.snapshot.compat",
    "jupyter_gkeresume.snapshot.writer",
)
MODULES = "import sys, json\nprint(json.dumps(sorted(sys.modules)))"


def test_the_extension_loads_without_the_store_and_the_first_checkpoint_imports_it(start_kernel):
    gcs = {"GKERESUME_STORE": "gs://some-bucket/snapshots"}  # a gs:// store changes nothing at load
    bare = set(start_kernel(env=gcs, extra_arguments=["--IPKernelApp.extensions=[]"])
               .run_json(MODULES))
    kernel = start_kernel(env=gcs)
    loaded = set(kernel.run_json(MODULES))
    assert "kernel_hooks" not in bare and "kernel_hooks.magics" in loaded

    added = loaded - bare
    third_party = sorted(m for m in added if m.split(".")[0] not in sys.stdlib_module_names
                         and m.split(".")[0] not in ("kernel_hooks", "jupyter_gkeresume", "IPython"))
    assert third_party == []
    assert [m for m in loaded if m.split(".")[0] in NOT_AT_START] == []
    assert [m for m in CHECKPOINT_MACHINERY if m in loaded] == []

    # the verbs and the magics load the rest when first used
    kernel.run("import os\nos.environ['GKERESUME_STORE'] = os.getcwd()\nimport numpy")
    assert "checkpoint " in kernel.run("%checkpoint")
    now = set(kernel.run_json(MODULES))
    assert {"kernel_hooks.api", "blake3", "jupyter_gkeresume.snapshot.store"} <= now
    assert "numpy.random" not in now  # no generator drawn from yet: none to save
    assert "kernel_hooks.restore" not in now  # a pause's checkpoint needs none of the resume
    # a local store is opened without fsspec (its import reads every distribution's entry points)
    assert [m for m in now if m.split(".")[0] in ("aiohttp", "gcsfs", "google", "fsspec")] == []
    assert kernel.run_json("import json, kernel_hooks\n"
                           "print(json.dumps([callable(kernel_hooks.replay),"
                           " kernel_hooks.replay.__module__]))") == [True, "kernel_hooks.api"]


def test_the_snapshot_package_names_what_it_loads_on_first_use():
    from jupyter_gkeresume import snapshot

    assert sorted(snapshot.__all__) == sorted(snapshot._EXPORTS)
    assert all(getattr(snapshot, name) is not None for name in snapshot.__all__)


def test_the_first_cell_is_the_sessions_and_a_session_that_patches_nothing_reads_no_metadata(
        start_kernel):
    """The baseline of attributes set on libraries (``library_patches``) is taken just before the
    first code runs, not when the extension loads: what the first cell sets on a library's class
    is the session's, found and carried. Taking it reads no distribution metadata, nor does a
    checkpoint of a session that patched nothing of another package: the load used to call
    ``importlib.metadata.packages_distributions()`` (about 0.5 s in this test environment of 200+
    distributions, on every kernel's start)."""
    kernel = start_kernel()
    kernel.run("import fractions\n"
               "def halve(self):\n    return self / 2\n"
               "fractions.Fraction.halve = halve")
    assert "checkpoint " in kernel.run("%checkpoint")
    found = kernel.run_json(
        "import json\nfrom kernel_hooks import library_patches\n"
        "print(json.dumps([[p.label for p in library_patches.find_patches()],"
        " library_patches._distributions.cache_info().currsize]))")
    assert found == [["fractions.Fraction.halve"], 0]
