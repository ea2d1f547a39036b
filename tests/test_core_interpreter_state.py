"""Interpreter and library state beside the variables (``kernel_hooks.interpreter_state``):
the registry's contract in-process, and one round trip in real kernels proving every built-in
entry: kernel A sets each state over several cells and observes it, checkpoints and dies; kernel B
resumes and observes the same."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import pickle
import sys
import warnings

import pytest
from fixtures_kernels import resumed_elsewhere

from jupyter_gkeresume.errors import InvalidInputError
from kernel_hooks import interpreter_state, library_state


@pytest.fixture
def scratch_entries(monkeypatch):
    """The registry with its built-in entries, restored after the test."""
    monkeypatch.setattr(interpreter_state, "entries", dict(interpreter_state.entries))
    return interpreter_state.entries


def test_register_state_refuses_what_cannot_work(scratch_entries):
    with pytest.raises(InvalidInputError, match="non-empty name"):
        interpreter_state.register_state("", capture=dict, restore=print)
    with pytest.raises(InvalidInputError, match="callable capture"):
        interpreter_state.register_state("mine", capture=None, restore=print)


def test_each_entry_is_restored_or_named(scratch_entries):
    """Captured None is not carried; a capture that raises is named at checkpoint and travels as
    ``NotCaptured``; at restore every state is restored or named: its capture failed, by its own
    reason, a raise, a failed record, or a missing entry."""
    scratch_entries.clear()
    box = {}

    def broken():
        raise RuntimeError("no state today")

    interpreter_state.register_state("absent", capture=lambda: None, restore=box.update)
    interpreter_state.register_state("broken", capture=broken, restore=box.update)
    interpreter_state.register_state("kept", capture=lambda: {"k": 1}, restore=box.update)
    interpreter_state.register_state("partial", capture=lambda: 2, restore=lambda s: "half of it")
    states, failed = interpreter_state.capture_all()
    assert failed == {"broken": "capture failed: RuntimeError: no state today"}
    assert states == {"broken": interpreter_state.NotCaptured(failed["broken"]),
                      "kept": {"k": 1}, "partial": 2}

    interpreter_state.register_state("raises", capture=lambda: 3, restore=lambda s: 1 / 0)
    restored, named = interpreter_state.restore_all(
        {**states, "raises": 3, "gone": 4}, {"lost": "record failed: ImportError: x"})
    assert restored == ["kept"] and box == {"k": 1}
    assert named == [
        "broken not restored: capture failed: RuntimeError: no state today",
        "partial not restored: half of it",
        "raises not restored: ZeroDivisionError: division by zero",
        "gone not restored: no entry registered for it in this kernel (register_state before "
        "%resume)",
        "lost not restored: record failed: ImportError: x",
    ]


def test_logging_handlers_are_rebuilt_once(tmp_path):
    """A stream and a file handler come back with level and format; one already there (a library
    adds its handler at import again) is not doubled; an other kind is named."""
    logger = logging.getLogger("gkeresume.test.rebuild")
    library_state.remember_baseline()
    stream = logging.StreamHandler()
    stream.setFormatter(logging.Formatter("{levelname}:{message}", style="{"))
    file = logging.FileHandler(tmp_path / "log.txt")
    file.setLevel(logging.WARNING)
    socket = logging.handlers.SocketHandler("localhost", 1)
    try:
        for handler in (stream, file, socket):
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        changed = library_state._logging_config()
        assert changed is not None and "gkeresume.test.rebuild" in changed
        logger.handlers.remove(file)
        logger.handlers.remove(socket)
        logger.setLevel(logging.NOTSET)
        why = library_state._restore_logging_config(
            {"gkeresume.test.rebuild": changed["gkeresume.test.rebuild"]})
        kinds = [(type(h).__name__, h.level, h.formatter and h.formatter._fmt)
                 for h in logger.handlers]
        assert logger.level == logging.DEBUG
        assert kinds == [("StreamHandler", 0, "{levelname}:{message}"),
                         ("FileHandler", logging.WARNING, None)]
        assert why == "handlers not rebuilt: SocketHandler of logger gkeresume.test.rebuild"
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(logging.NOTSET)


HELD_HANDLER = r"""
import json, logging, sys
log = logging.getLogger("notebook.held")
log.setLevel(logging.INFO)
console = logging.StreamHandler(sys.stdout)  # held by a variable, changed in later cells
log.addHandler(console)
"""
OBSERVE_HELD_HANDLER = r"""
console.setFormatter(logging.Formatter("held: %(message)s"))
log.info("after")
print(json.dumps([h is console for h in log.handlers]))
"""


def test_a_handler_a_variable_holds_stays_the_loggers_handler(start_kernel):
    """``console = logging.StreamHandler(sys.stdout); log.addHandler(console)``, then
    ``console.setFormatter(...)`` in a later cell: after a resume the variable and the logger's
    handler were two objects (the logger's rebuilt from its recipe), so the formatter reached
    neither the output nor ``log.handlers`` (noticed in stop 53). The handler the namespace holds
    is the one the logger gets back."""
    a = start_kernel()
    a.run(HELD_HANDLER)
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "logging configuration" in out, out
    assert b.run(OBSERVE_HELD_HANDLER) == "held: after\n[true]\n"  # as in a kernel not cut


def test_a_librarys_own_handler_made_again_takes_the_sessions_format_and_level():
    """A library adds its handler when it is imported (transformers' ``_default_handler``, on
    stderr); the session changed its format (``transformers.utils.logging.
    enable_explicit_format()``). The resumed kernel's import made that handler again with the
    library's format, and the session's was rebuilt beside it: every message came out twice,
    under an exact verdict (found by a probe). The handler the library made again takes the
    session's format and level instead."""
    logger = logging.getLogger("gkeresume.test.library")
    library_state.remember_baseline()
    imported = logging.StreamHandler()  # as the library makes it at import
    imported.setFormatter(logging.Formatter("[lib] %(message)s"))
    logger.addHandler(imported)
    try:
        imported.setFormatter(logging.Formatter("[%(levelname)s|%(name)s] %(message)s"))
        imported.setLevel(logging.INFO)
        changed = library_state._logging_config()["gkeresume.test.library"]
        logger.removeHandler(imported)
        again = logging.StreamHandler()  # the resumed kernel's import
        again.setFormatter(logging.Formatter("[lib] %(message)s"))
        logger.addHandler(again)
        assert library_state._restore_logging_config({"gkeresume.test.library": changed}) is None
        assert logger.handlers == [again]
        assert (again.formatter._fmt, again.level) == ("[%(levelname)s|%(name)s] %(message)s",
                                                       logging.INFO)
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


def test_a_second_handler_on_the_librarys_stream_is_rebuilt_beside_the_one_made_again():
    """``transformers.logging.add_handler(logging.StreamHandler())`` gives transformers' logger
    a second stderr handler beside the one its import makes: after a resume the import's handler
    stood for both, and each message came out once instead of twice, under an exact verdict (a
    helper's probe). Each handler made again stands for one of the session's only."""
    logger = logging.getLogger("gkeresume.test.second")
    library_state.remember_baseline()
    imported, added = logging.StreamHandler(), logging.StreamHandler()
    logger.addHandler(imported)
    logger.addHandler(added)
    try:
        changed = library_state._logging_config()["gkeresume.test.second"]
        logger.removeHandler(imported)
        logger.removeHandler(added)
        again = logging.StreamHandler()  # the resumed kernel's import
        logger.addHandler(again)
        assert library_state._restore_logging_config({"gkeresume.test.second": changed}) is None
        assert len(logger.handlers) == 2 and logger.handlers[0] is again
        assert all(type(h) is logging.StreamHandler and h.stream is sys.stderr
                   for h in logger.handlers)
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


def test_a_handler_the_session_removed_stays_removed():
    """``transformers.utils.logging.disable_default_handler()`` removes the handler transformers
    adds at import; the resumed kernel's import added it again and nothing removed it: every
    message went to stderr again, under an exact verdict (found by a probe). A handler made
    again that the session's logger did not have is removed; one of a kind the snapshot cannot
    tell apart stays."""
    logger = logging.getLogger("gkeresume.test.removed")
    library_state.remember_baseline()
    imported = logging.StreamHandler()  # as the library makes it at import
    logger.addHandler(imported)
    logger.setLevel(logging.WARNING)
    try:
        logger.removeHandler(imported)  # disable_default_handler()
        changed = library_state._logging_config()["gkeresume.test.removed"]
        again, other = logging.StreamHandler(), logging.NullHandler()
        logger.addHandler(again)  # the resumed kernel's import
        logger.addHandler(other)
        assert library_state._restore_logging_config({"gkeresume.test.removed": changed}) is None
        assert logger.handlers == [other]
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


def _no_secrets(record):
    return "secret" not in record.getMessage()


def test_the_filters_a_session_added_to_loggers_and_handlers_come_back():
    """``logger.addFilter(fn)`` and ``handler.addFilter(logging.Filter("app"))`` were not carried:
    after a resume the filtered records were logged again, under an exact verdict (found by a
    probe). The state travels through pickle, as in a snapshot; the filters come back on the
    logger and on the handler rebuilt for it."""
    import pickle

    logger = logging.getLogger("gkeresume.test.filters")
    library_state.remember_baseline()
    handler = logging.StreamHandler()
    handler.addFilter(logging.Filter("gkeresume.test"))
    logger.addHandler(handler)
    logger.addFilter(_no_secrets)
    try:
        changed = pickle.loads(pickle.dumps(library_state._logging_config()))
        logger.removeHandler(handler)
        logger.removeFilter(_no_secrets)  # a fresh kernel's logger
        assert library_state._restore_logging_config(changed) is None
        assert logger.filters == [_no_secrets]
        (rebuilt,) = logger.handlers
        assert [f.name for f in rebuilt.filters] == ["gkeresume.test"]
        assert library_state._restore_logging_config(changed) is None  # again: nothing doubled
        assert len(logger.filters) == 1 and len(logger.handlers[0].filters) == 1
    finally:
        for kept in list(logger.handlers):
            logger.removeHandler(kept)
        for kept in list(logger.filters):
            logger.removeFilter(kept)


def test_logging_switches_travel():
    """``logging.disable(level)`` (notebooks quiet every library so) and
    ``logging.captureWarnings(True)`` came back off while the verdict said ``exact`` (found by a
    probe): captured, set again, and nothing captured when neither is on."""
    assert library_state._logging_switches() is None
    logging.disable(logging.INFO)
    logging.captureWarnings(True)
    try:
        switches = library_state._logging_switches()
        assert switches == {"disable": logging.INFO, "capture_warnings": True}
        logging.disable(logging.NOTSET)
        logging.captureWarnings(False)
        assert library_state._restore_logging_switches(switches) is None
        assert logging.root.manager.disable == logging.INFO
        assert library_state._logging_switches() == switches
    finally:
        logging.disable(logging.NOTSET)
        logging.captureWarnings(False)


def test_a_default_thread_count_stays_behind_and_a_chosen_one_travels(monkeypatch):
    """torch's thread count travels only where the session chose it: the count a fresh process
    starts with (the CPUs it may use, or ``OMP_NUM_THREADS``) stays behind, so a kernel resumed on
    a bigger node is not pinned to the old node's CPUs."""
    import torch

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    cpus, before = len(os.sched_getaffinity(0)), torch.get_num_threads()
    try:
        torch.set_num_threads(cpus)
        assert "num_threads" not in (library_state._torch_settings() or {})
        torch.set_num_threads(cpus + 3)
        assert library_state._torch_settings()["num_threads"] == cpus + 3
        monkeypatch.setenv("OMP_NUM_THREADS", str(cpus + 3))
        assert "num_threads" not in (library_state._torch_settings() or {})
    finally:
        torch.set_num_threads(before)


def test_nothing_changed_captures_nothing(monkeypatch):
    """A session that changed nothing carries no library entry (cheap checkpoints). This test
    process is no fresh one: a test before may have compiled with dynamo, whose first use turns
    distributions' argument validation off (torch/_dynamo/eval_frame.py ``TorchPatcher``): it is
    set back to a fresh process's for the test."""
    import torch

    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", __debug__)
    library_state.remember_baseline()
    with warnings.catch_warnings():
        warnings.filters[:] = library_state._baseline["warnings"]
        assert library_state._warning_filters() is None
    assert library_state._numpy_options() is None
    assert library_state._torch_settings() is None
    assert library_state._python_settings() is None


def test_a_default_device_this_machine_lacks_is_named_not_set():
    """A session that ran ``torch.set_default_device('cuda')`` resumed where there is no GPU:
    the default stays the CPU (else every new tensor would fail) and the entry says why."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    why = library_state._restore_torch_settings({"default_device": "cuda:0",
                                                 "print_options": {"precision": 3}})
    try:
        assert why is not None and why.startswith("not accepted here: default_device (cuda:0 is "
                                                  "not available here: ")
        assert str(torch.get_default_device()) == "cpu"
        assert torch._tensor_str.PRINT_OPTS.precision == 3  # the other settings still set
    finally:
        torch.set_printoptions(profile="default")


def test_a_process_group_of_one_comes_back_and_a_larger_one_is_named():
    """``torch.distributed.init_process_group`` in a notebook (world size 1: a library that
    wants a group, a DDP or FSDP recipe tried on one GPU) is state of torch's, not a variable:
    after a resume ``dist.is_initialized()`` was ``False`` and every collective raised, under
    ``exact``. A group of one process is made again, on a store of its own (the session's
    port may be taken); a larger one cannot be (its other processes did not resume with this
    kernel) and is named."""
    import torch.distributed as dist

    assert library_state._torch_process_group() is None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        state = pickle.loads(pickle.dumps(library_state._torch_process_group()))
    finally:
        dist.destroy_process_group()
    assert state == {"backend": "gloo", "rank": 0, "world_size": 1}
    try:
        assert library_state._restore_torch_process_group(state) is None
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert dist.get_world_size() == 1 and dist.get_rank() == 0
    finally:
        dist.destroy_process_group()
    why = library_state._restore_torch_process_group({"backend": "nccl", "rank": 1,
                                                      "world_size": 4})
    assert why == ("rank 1 of a nccl process group of 4 processes: its other processes did "
                   "not resume with this kernel (call init_process_group again)")
    assert not dist.is_initialized()


def test_a_distributed_model_over_a_group_of_one_comes_back(tmp_path):
    """``DistributedDataParallel.__setstate__`` asks for the default process group
    (torch/nn/parallel/distributed.py), which is made again only after the variables: the
    model was not restored. Its group, when it is one process, is made first."""
    import builtins

    import torch
    import torch.distributed as dist

    import kernel_hooks

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        x = torch.randn(3, 4)
        namespace = {"model": model, "x": x, "y": model(x).detach()}
        kernel_hooks.checkpoint(namespace=namespace, store=str(tmp_path), workspace="ws")
    finally:
        dist.destroy_process_group()
    restored: dict = {"__builtins__": builtins}
    try:
        report = kernel_hooks.resume(namespace=restored, store=str(tmp_path), workspace="ws")
        assert report.verdict["level"] == "exact", report.verdict
        assert dist.is_initialized() and dist.get_world_size() == 1
        assert torch.equal(restored["model"](restored["x"]), namespace["y"])
        restored["model"](restored["x"]).sum().backward()  # its reducer works
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

SESSION = [
    # matplotlib: a figure that no variable names, drawn over two cells; a second one; rc
    "%matplotlib agg",
    "import matplotlib.pyplot as plt\nplt.rcParams['lines.linewidth'] = 3.5\n"
    "plt.figure(figsize=(14, 5))\nfor i in range(1, 5):\n    plt.subplot(2, 4, i)\n"
    "    plt.plot([0, i, 2 * i])",
    "for i in range(5, 9):\n    plt.subplot(2, 4, i)\n    plt.bar([1, 2], [i, 1])\n"
    "plt.figure(7, figsize=(3, 2)); plt.plot([1, 0])\nplt.figure(1); plt.subplot(2, 4, 6)",
    # warnings, logging
    "import warnings, logging\nwarnings.filterwarnings('error', message='gke-test')\n"
    "logging.basicConfig(level=logging.INFO, format='%(levelname)s|%(message)s')\n"
    "logging.getLogger('gke.debug').setLevel(logging.DEBUG)\n"
    "logging.getLogger('gke.file').addHandler(logging.FileHandler(LOG_PATH))",
    # numpy, pandas, torch
    "import numpy as np, pandas as pd, torch\nnp.set_printoptions(precision=3)\n"
    "pd.set_option('display.max_rows', 7); pd.set_option('display.precision', 2)\n"
    "np.seterr(divide='ignore', over='raise')\n"
    "torch.set_default_dtype(torch.float64); torch.set_grad_enabled(False)\n"
    "torch.set_num_threads(2); torch.use_deterministic_algorithms(True, warn_only=True)\n"
    "torch.backends.cudnn.benchmark = True; torch.set_float32_matmul_precision('medium')\n"
    "torch.autograd.set_detect_anomaly(True)\n"
    "torch.backends.cudnn.allow_tf32 = False\n"
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False\n"
    "torch.backends.cuda.enable_flash_sdp(False); torch.set_default_device('meta')\n"
    "torch.set_printoptions(precision=2, sci_mode=False); torch.backends.mkldnn.enabled = False\n"
    "torch.set_warn_always(True); torch.set_flush_denormal(True)\n"
    "torch.__future__.set_swap_module_params_on_conversion(True)\n"
    "torch.multiprocessing.set_sharing_strategy('file_system'); torch.hub.set_dir('/tmp/hub-x')\n"
    "torch.sparse.check_sparse_tensor_invariants.enable()",
    # the interpreter's own settings
    "import decimal, gc, sys\nsys.setrecursionlimit(4321); decimal.getcontext().prec = 50\n"
    "decimal.getcontext().rounding = decimal.ROUND_DOWN; gc.set_threshold(5000, 20, 30)\n"
    "sys.set_int_max_str_digits(9000); sys.setswitchinterval(0.001)\n"
    "import faulthandler; faulthandler.enable()\nimport tracemalloc; tracemalloc.start(7)\n"
    "gc.set_debug(gc.DEBUG_SAVEALL)\n"
    "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])",
    # the process's own: umask, time zone, signal handlers (a notebook's, an ignored signal)
    "import os, signal, time\nos.umask(0o027); os.environ['TZ'] = 'Asia/Tokyo'; time.tzset()\n"
    "def on_usr1(number, frame):\n    print('usr1', number)\n"
    "signal.signal(signal.SIGUSR1, on_usr1); signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGRTMIN + 1, on_usr1)  # a real-time signal: no name in Signals\n"
    "import locale, resource\nlocale.setlocale(locale.LC_ALL, 'C')\n"
    "_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (_soft - 1, _hard))",
    # IPython
    "%load_ext autoreload",
    "%autoreload 2",
    "%config IPCompleter.greedy = True",
    # notebook code with a traceback and a warning
    "import inspect, traceback\n\ndef bad(x):\n    y = x + 1\n    raise ValueError(f'bad {y}')\n"
    "\nclass Careful:\n    def warn(self):\n        warnings.warn('careful now', UserWarning)\n"
    "        return 1",
    "40 + 2",
    "'x' * 3",
    # shell aliases
    "%alias hello echo hello %s\n%unalias rmdir",
]

OBSERVE = r"""
import hashlib, json, inspect, traceback, warnings, logging, os, signal, sys, time
import numpy as np, pandas as pd, torch, matplotlib, matplotlib.pyplot as plt
from matplotlib._pylab_helpers import Gcf

def _figure(num):
    fig = Gcf.figs[num].canvas.figure
    fig.canvas.draw()
    return [list(fig.get_size_inches()), len(fig.axes),
            hashlib.sha256(bytes(fig.canvas.buffer_rgba())).hexdigest()]

def _raised():
    try:
        bad(1)
    except ValueError:
        frame = traceback.extract_tb(sys.exc_info()[2])[-1]
        return [frame.filename, frame.lineno, frame.line,
                get_ipython().compile.format_code_name(frame.filename)]

def _warned():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        Careful().warn()
    w = caught[0]
    return [w.filename, w.lineno, __import__('linecache').getline(w.filename, w.lineno).strip()]

def _errors():
    try:
        warnings.warn('gke-test')
        return 'no error'
    except UserWarning:
        return 'error'

def _handlers(name):
    return [[type(h).__name__, getattr(h, 'stream', None) is sys.stderr,
             h.formatter and h.formatter._fmt] for h in logging.getLogger(name).handlers]

_reloader = get_ipython().magics_manager.registry['AutoreloadMagics']._reloader
print(json.dumps({
    "figures": plt.get_fignums(), "current": plt.gcf().number,
    "current_axes": plt.gcf().axes.index(plt.gca()),
    "figure_1": _figure(1), "figure_7": _figure(7),
    "backend": matplotlib.get_backend(), "linewidth": plt.rcParams['lines.linewidth'],
    "warning_is_error": _errors(),
    "root": [logging.getLogger().level, _handlers('')],
    "debug_level": logging.getLogger('gke.debug').level,
    "file_handler": [type(h).__name__ for h in logging.getLogger('gke.file').handlers],
    "numpy": [np.get_printoptions()['precision'], repr(np.array([1 / 3])), np.geterr()],
    "pandas": [pd.get_option('display.max_rows'), pd.get_option('display.precision'),
               repr(pd.Series([1 / 3]))],
    "torch": [str(torch.get_default_dtype()), torch.is_grad_enabled(), torch.get_num_threads(),
              torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
              torch.is_anomaly_enabled(), torch.backends.cudnn.allow_tf32,
              torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
              torch.backends.cuda.flash_sdp_enabled(), str(torch.get_default_device()),
              repr(torch.tensor([1 / 3], device='cpu')), torch.backends.mkldnn.enabled,
              torch.is_warn_always_enabled(),
              torch.tensor([1e-40], dtype=torch.float32, device='cpu').item(),
              torch.__future__.get_swap_module_params_on_conversion(),
              torch.multiprocessing.get_sharing_strategy(), torch.hub.get_dir(),
              torch.sparse.check_sparse_tensor_invariants.is_enabled()],
    "python": [sys.getrecursionlimit(), str(__import__('decimal').Decimal(2).sqrt()),
               __import__('gc').get_threshold(), sys.get_int_max_str_digits(),
               sys.getswitchinterval(), __import__('faulthandler').is_enabled(),
               __import__('tracemalloc').is_tracing()
               and __import__('tracemalloc').get_traceback_limit(), __import__('gc').get_debug(),
               sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))],
    "process": [oct((lambda m: (os.umask(m), m)[1])(os.umask(0))), time.tzname,
                time.localtime(0).tm_hour, signal.getsignal(signal.SIGUSR1).__name__,
                signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN,
                signal.getsignal(signal.SIGRTMIN + 1).__name__,
                __import__('locale').setlocale(__import__('locale').LC_ALL),
                __import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE)[0]],
    "autoreload": [sorted(get_ipython().extension_manager.loaded),
                   _reloader.enabled, _reloader.check_all],
    "greedy": get_ipython().Completer.greedy,
    "aliases": [dict(get_ipython().alias_manager.aliases).get("hello"),
                get_ipython().alias_manager.is_alias("rmdir")],
    "code": [bad.__code__.co_filename, inspect.getsource(bad), inspect.getsource(Careful.warn)],
    "raised": _raised(), "warned": _warned(),
    "outputs": [_, __, _{forty_two}, Out[{forty_two}]],
}))
del _figure, _raised, _warned, _errors, _handlers, _reloader
"""


def test_interpreter_and_library_state_come_back(start_kernel, tmp_path):
    """Every built-in entry holds after resume as it did before the checkpoint (the figure's
    size, axes and pixels, the current figure and axes; tracebacks, warnings and getsource show
    the cell's file and lines, IPython names it ``Cell In[N]``); a kernel whose hash seed is not
    the snapshot's says so in one line. The umask, a time zone set with ``time.tzset()``, the
    signal handlers, the locale and the resource limits the session set came back as the fresh
    process had them, while the verdict said ``exact`` (found by a probe); so did the thread
    switch interval, ``faulthandler.enable()``, ``tracemalloc.start(7)``, ``torch.set_warn_always``,
    ``torch.set_flush_denormal``, ``torch.__future__``'s conversion switches, torch's sharing
    strategy, ``torch.hub.set_dir`` (found by later probes) and
    ``torch.sparse.check_sparse_tensor_invariants.enable()`` (stop 54)."""
    a = start_kernel({"PYTHONHASHSEED": "1234"})  # as the server starts it (HashSeeds)
    a.run(f"LOG_PATH = {str(tmp_path / 'gke.log')!r}")
    counts = {}
    for cell in SESSION:
        a.run(cell)
        counts[cell] = a.last_execution_count
    observe = OBSERVE.replace("{forty_two}", str(counts["40 + 2"]))
    before = a.run_json(observe)
    assert before["figures"] == [1, 7] and before["current"] == 1 and before["current_axes"] == 5
    assert before["figure_1"][:2] == [[14.0, 5.0], 8]
    defining_bad = next(cell for cell in SESSION if "def bad" in cell)
    assert before["raised"][3] == ["Cell", f"In[{counts[defining_bad]}]"]
    assert before["outputs"] == ["xxx", 42, 42, 42]
    assert before["pandas"][:2] == [7, 2] and "0.33" in before["pandas"][2]
    assert before["aliases"] == ["echo hello %s", False]
    assert before["process"][:7] == ["0o27", ["JST", "JST"], 9, "on_usr1", True, "on_usr1", "C"]
    assert before["python"][-5:] == [0.001, True, 7, 32, [12]]  # DEBUG_SAVEALL, SIGUSR2 blocked
    # warn always, denormals flushed, swap on conversion, the sharing strategy, the hub's folder
    # and sparse tensors' invariants checked
    assert before["torch"][-6:] == [True, 0.0, True, "file_system", "/tmp/hub-x", True]
    out = a.run("%checkpoint")
    assert "interpreter state" not in out, out
    a.kill()

    b = start_kernel({"PYTHONHASHSEED": "99"})  # not started by the server: another seed
    out = b.run("%resume")
    assert "not restored" not in out, out
    [line] = [line for line in out.splitlines() if "hash seed" in line]  # said in one line
    assert "string hash seed: this kernel's is 99, the snapshot's 1234" in line
    after = b.run_json(observe)
    assert after == before, json.dumps({k: (before[k], after[k]) for k in before
                                        if before[k] != after[k]})
    assert b.run("os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.05)") == "usr1 10\n"
    b.run("logging.getLogger('gke.file').warning('after resume')")
    assert (tmp_path / "gke.log").read_text().strip().endswith("after resume")


TORCH_PROCESS_SWITCHES = r"""
import json, torch
torch.set_num_interop_threads(1)  # before any parallel work, as torch requires
torch.distributions.Distribution.set_default_validate_args(False)
torch.backends.mha.set_fastpath_enabled(False)
torch.jit.enable_onednn_fusion(True)
torch._C._jit_set_texpr_fuser_enabled(False)
torch.jit.set_fusion_strategy([("DYNAMIC", 3)])
torch.backends.mkldnn.deterministic = True
torch.backends.nnpack.set_flags(False)
torch._C._set_graph_executor_optimize(False)
torch._C._jit_set_profiling_executor(False)
torch._C._jit_override_can_fuse_on_cpu(True)
torch.utils.backcompat.broadcast_warning.enabled = True
torch.compiler.set_stance("force_eager")
torch.backends.quantized.engine = "qnnpack"  # pytorch/tutorials' mobile quantization recipes
torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
torch.autograd.graph.set_warn_on_accumulate_grad_stream_mismatch(False)
"""
OBSERVE_TORCH_PROCESS_SWITCHES = r"""
strategy = torch.jit.set_fusion_strategy([("STATIC", 2)]); torch.jit.set_fusion_strategy(strategy)
executor = torch._C._jit_set_profiling_executor(True); torch._C._jit_set_profiling_executor(executor)
print(json.dumps([torch.get_num_interop_threads(), torch.distributions.Distribution._validate_args,
                  torch.backends.mha.get_fastpath_enabled(), torch.jit.onednn_fusion_enabled(),
                  torch._C._jit_texpr_fuser_enabled(), strategy, torch.backends.mkldnn.deterministic,
                  torch._C._get_nnpack_enabled(), torch._C._get_graph_executor_optimize(), executor,
                  torch._C._jit_can_fuse_on_cpu(), torch.utils.backcompat.broadcast_warning.enabled,
                  torch._dynamo.eval_frame._stance.stance, torch.backends.quantized.engine,
                  torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(),
                  torch._C._warn_on_accumulate_grad_stream_mismatch()]))
"""


def test_torchs_process_wide_switches_come_back(start_kernel):
    """Switches torch keeps in C++ or sets through functions: the interop thread count,
    distributions' default argument validation, the attention fast path, TorchScript's fusers
    and executor, mkldnn's determinism, NNPACK, the backward-compatibility warnings and
    ``torch.compiler.set_stance("force_eager")``, the quantized engine (pytorch/tutorials
    recipes_source/torch_compiler_set_stance_tutorial.py and recipes/tuning_guide.py): after a
    resume each was a fresh process's, under an exact verdict (found by a helper's probes)."""
    a = start_kernel()
    a.run(TORCH_PROCESS_SWITCHES)
    expected = a.run_json(OBSERVE_TORCH_PROCESS_SWITCHES)
    assert expected == [1, False, False, True, False, [["DYNAMIC", 3]], True, False, False, False,
                        True, True, "force_eager", "qnnpack", True, False]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "torch settings" in out, out
    assert b.run_json(OBSERVE_TORCH_PROCESS_SWITCHES) == expected


TORCH_CONFIGS = r"""
import json, torch, torch._dynamo, torch._inductor.config
torch._dynamo.config.cache_size_limit = 64          # an alias: recompile_limit is set
torch._inductor.config.coordinate_descent_tuning = True
import torch._dynamo.config as dynamo_config        # the module held under a name of its own
"""

OBSERVE_TORCH_CONFIGS = r"""
import json, torch
print(json.dumps([torch._dynamo.config.recompile_limit,
                  torch._inductor.config.coordinate_descent_tuning,
                  dynamo_config is torch._dynamo.config]))
"""


def test_torch_config_modules_come_back(start_kernel):
    """What a torch.compile notebook sets on ``torch._dynamo.config`` and
    ``torch._inductor.config`` (torch/utils/_config_module.py keeps it in each option's
    ``user_override``, a ContextVar) holds from cell to cell and is set again in the resumed
    kernel, which imports those modules itself; it was lost while the resume said exact. Such a
    module held in a variable (``import torch._dynamo.config as dynamo_config``: its class is a
    subclass of ``ModuleType``, which cloudpickle's dispatch on the exact type misses) was named
    as not saved; it comes back as the module of the resumed kernel."""
    a = start_kernel()
    a.run(TORCH_CONFIGS)
    before = a.run_json(OBSERVE_TORCH_CONFIGS)
    assert before == [64, True, True]
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0] and "torch config modules" in out, out
    assert b.run_json(OBSERVE_TORCH_CONFIGS) == before


SHELL_AND_GLOBAL_HOOKS = r"""
import json, multiprocessing, torch
from IPython.core.magic import register_line_magic
from torch.optim.optimizer import register_optimizer_step_post_hook

@register_line_magic
def shout(line):
    return line.upper()

from IPython.core.magic import Magics, line_magic, magics_class

@magics_class
class Mine(Magics):  # its instance holds the shell
    @line_magic
    def twice(self, line):
        return line * 2

get_ipython().register_magics(Mine)

multiprocessing.set_start_method("spawn", force=True)
calls, ran = [], []
forward = torch.nn.modules.module.register_module_forward_hook(
    lambda module, args, out: calls.append(type(module).__name__))
stepped = register_optimizer_step_post_hook(lambda opt, args, kwargs: calls.append("stepped"))
get_ipython().events.register("post_run_cell", lambda result: ran.append(result.execution_count))

class Box:
    pass

get_ipython().display_formatter.formatters["text/plain"].for_type(Box, lambda o, p, cycle: p.text("BOX!"))
%precision 3
%xmode Minimal
"""
TRANSFORMERS = r"""
import ast

def shout_to_print(lines):  # an input transformer: the cell's text
    return [line.replace("SHOUT(", "print(") for line in lines]

class Doubler(ast.NodeTransformer):  # an AST transformer: the parsed cell
    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(42), node) if node.value == 21 else node

get_ipython().input_transformers_post.append(shout_to_print)
get_ipython().ast_transformers.append(Doubler())

import copyreg

class Meters:
    def __init__(self, value, cache=None):
        self.value, self.cache = value, cache

def meters_without_cache(m):  # pickle and copy leave the cache out
    return (Meters, (m.value,))

copyreg.pickle(Meters, meters_without_cache)
"""

OBSERVE_HOOKS = r"""
calls.clear(); ran.clear()
net = torch.nn.Linear(1, 1)
torch.optim.SGD(net.parameters(), lr=0.1).step()
net(torch.ones(1))
print(json.dumps([multiprocessing.get_start_method(allow_none=True), calls,
                  get_ipython().display_formatter.formatters["text/plain"].float_precision,
                  get_ipython().InteractiveTB.mode, get_ipython().run_line_magic("shout", "hi"),
                  get_ipython().run_line_magic("twice", "ab"),
                  get_ipython().display_formatter.formatters["text/plain"](Box()),
                  "SHOUT(".lower(), 21,
                  __import__("copy").copy(Meters(3, cache=[1])).cache]))
"""


def test_shell_hooks_global_hooks_and_the_start_method_come_back(start_kernel):
    """What a notebook registers beside its variables comes back, and nothing is named: magics
    it defined (a function, and a ``Magics`` class, whose instance holds the shell), an event
    callback, a display printer for its class, ``%precision`` and ``%xmode`` (IPython keeps each
    in the shell, not in the namespace), a global module forward hook and a global optimizer hook
    (torch/nn/modules/module.py, torch/optim/optimizer.py keep them in module dicts; their handles
    pickled a copy torch never looked at), and multiprocessing's start method (``spawn``, which
    CUDA needs in DataLoader workers). All were lost while the resume said exact; so were, found
    later by probes, the code transformers it added to the shell (an input transformer of the
    cell's text, an AST transformer) and a reducer it registered with ``copyreg.pickle``, which
    ``copy`` and ``pickle`` use. The handles still remove their hooks."""
    a = start_kernel()
    a.run(SHELL_AND_GLOBAL_HOOKS)
    a.run(TRANSFORMERS)
    before = a.run_json(OBSERVE_HOOKS)
    assert before == ["spawn", ["stepped", "Linear"], "3", "Minimal", "HI", "abab", "BOX!",
                      "print(", 42, None]
    assert len(a.run_json("print(json.dumps(ran))")) == 1  # OBSERVE_HOOKS' own run
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0] and "not restored" not in out, out
    assert b.run_json(OBSERVE_HOOKS) == before
    assert len(b.run_json("print(json.dumps(ran))")) == 1
    b.run("forward.remove(); stepped.remove()")
    assert b.run_json(OBSERVE_HOOKS)[1] == []


LIBRARY_DISPLAY = r"""
import json, sympy
from IPython.core.formatters import PlainTextFormatter
ip = get_ipython()

class Shouting(PlainTextFormatter):
    def __call__(self, obj):
        return super().__call__(obj).upper()

ip.display_formatter.formatters["text/plain"] = Shouting()
sympy.init_printing(use_latex="mathjax")  # a library's call registers printers in the shell

def quiet_traceback(*args, **kwargs):
    print("an error, quietly")

ip.showtraceback = quiet_traceback
"""
OBSERVE_LIBRARY_DISPLAY = r"""
plain = ip.display_formatter.formatters["text/plain"]
latex = ip.display_formatter.formatters["text/latex"]
print(json.dumps([type(plain).__name__, plain.lookup_by_type(list).__module__,
                  latex.lookup_by_type(list).__module__,
                  ip.display_formatter.format(["x"])[0]["text/plain"],
                  ip.showtraceback.__name__]))
"""


def test_display_printers_formatters_and_shell_functions_set_in_the_session_come_back(
        start_kernel):
    """``sympy.init_printing()`` registers sympy's printers in the shell's display formatters, a
    call of the session that a fresh kernel's ``import sympy`` does not make; a formatter the
    session put in place of IPython's (``rich.pretty.install()`` does), and a function it set on
    the shell (``rich.traceback.install()`` sets ``showtraceback``): after a resume all three
    were IPython's again, under an exact verdict (found by a probe; only the notebook's own
    printers travelled). They travel now, and one that does not pickle is named (rich's hold
    its console, which does not)."""
    a = start_kernel()
    a.run(LIBRARY_DISPLAY)
    expected = a.run_json(OBSERVE_LIBRARY_DISPLAY)
    assert expected == ["Shouting", "sympy.interactive.printing", "sympy.interactive.printing",
                        "['X']", "quiet_traceback"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert b.run_json(OBSERVE_LIBRARY_DISPLAY) == expected


def test_hugging_face_progress_bar_switches_travel(monkeypatch):
    """``transformers.logging.disable_progress_bar()`` flips transformers' ``_tqdm_active``
    (transformers/utils/logging.py) and huggingface_hub's ``progress_bar_states``
    (huggingface_hub/utils/tqdm.py): both are put back in a process that has them fresh. Nothing
    travels where the session flipped nothing."""
    import importlib

    from transformers.utils import logging as hf_logging

    hub_bars = importlib.import_module("huggingface_hub.utils.tqdm")  # the module, not its class

    monkeypatch.setattr(hub_bars, "HF_HUB_DISABLE_PROGRESS_BARS", None)
    saved = dict(hub_bars.progress_bar_states), hf_logging._tqdm_active

    def fresh():
        hub_bars.progress_bar_states.clear()
        hf_logging._tqdm_active = True

    try:
        fresh()
        assert library_state._hf_switches() is None
        hf_logging.disable_progress_bar()
        state = library_state._hf_switches()
        assert state == {"hub": {"_global": False}, "transformers": False}
        fresh()  # the resumed kernel
        assert library_state._restore_hf_switches(state) is None
        assert not hf_logging.is_progress_bar_enabled() and hub_bars.are_progress_bars_disabled()
    finally:
        fresh()
        hub_bars.progress_bar_states.update(saved[0])
        hf_logging._tqdm_active = saved[1]


def test_the_per_backend_float32_precision_travels():
    """``torch.backends.cuda.matmul.fp32_precision = "tf32"`` (torch >= 2.9, the TF32 API its docs
    give now) makes the legacy getters raise ("mix of the legacy and new APIs"): the whole torch
    settings entry failed at checkpoint. The per-backend settings travel instead, and come back."""
    import torch

    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("this torch has no per-backend fp32_precision")
    try:
        matmul.fp32_precision = "tf32"
        torch.set_grad_enabled(False)
        state = library_state._torch_settings()
        assert state["fp32_precision"]["cuda.matmul"] == "tf32" and state["grad_enabled"] is False
        matmul.fp32_precision = "none"  # as a fresh process has it
        torch.set_grad_enabled(True)
        assert library_state._restore_torch_settings(state) is None
        assert matmul.fp32_precision == "tf32" and not torch.is_grad_enabled()
    finally:
        matmul.fp32_precision = "none"
        torch.set_grad_enabled(True)
    assert torch.get_float32_matmul_precision() == "highest"


class RefusesPickling:
    def __reduce__(self):
        raise TypeError("this state cannot be pickled")


def test_a_state_entry_that_does_not_pickle_is_named_at_resume_too(tmp_path):
    """An entry whose state fails to pickle was named at checkpoint only: the resume said exact.
    It travels as ``NotCaptured`` and the resume names it."""
    import kernel_hooks

    interpreter_state.register_state("refusing entry", capture=RefusesPickling,
                                     restore=lambda state: None)
    try:
        root = str(tmp_path / "store")
        result = kernel_hooks.checkpoint(namespace={"x": 1}, store=root, workspace="ws")
        assert [s.name for s in result.skipped] == ["refusing entry"]
        resumed = kernel_hooks.resume(namespace={}, store=root, workspace="ws")
    finally:
        del interpreter_state.entries["refusing entry"]
    assert resumed.verdict["level"] == "partial", resumed.verdict
    assert any("refusing entry not restored: not saved: TypeError" in w for w in resumed.warnings)


def test_one_output_that_cannot_travel_costs_only_itself(start_kernel):
    """``Out`` holding a value whose pickling raises lost the whole output history (before:
    silently). Now the other outputs and ``_`` come back, and that one is named. An output that is
    a variable's value travels as that variable (no second pickling), and is it again."""
    a = start_kernel()
    a.run("class Refuses:\n    def __reduce__(self):\n        raise TypeError('refuses pickling')\n")
    refused = a.run("Refuses()") and a.last_execution_count
    answer = a.run("6 * 7") and a.last_execution_count
    shown = a.run("data = list(range(5))\ndata") and a.last_execution_count
    kept = a.run("keeper = Refuses()\nkeeper") and a.last_execution_count
    a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "(partial)" in out.splitlines()[0], out
    assert (f"  warning: IPython output history not restored: Out[{refused}] (TypeError: "
            f"refuses pickling), Out[{kept}] (its variable keeper did not come back)"
            ) in out.splitlines(), out
    assert b.run(f"print(Out[{answer}], _{answer}, {refused} in Out, Out[{shown}] is data)"
                 ).split() == ["42", "42", "False", "True"]


def test_one_shell_hook_that_cannot_travel_costs_only_itself(start_kernel):
    """An event callback whose pickling raises (its default argument refuses) lost every hook of
    the notebook: the other callback and the magic come back, and that one is named."""
    a = start_kernel()
    a.run("class Refuses:\n    def __reduce__(self):\n        raise TypeError('refuses pickling')\n")
    a.run("ran = []\nip = get_ipython()\n"
          "ip.events.register('post_run_cell', lambda result, keep=Refuses(): None)\n"
          "ip.events.register('post_run_cell', lambda result: ran.append(1))\n"
          "from IPython.core.magic import register_line_magic\n"
          "register_line_magic(lambda line: line[::-1])\n")
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(partial)" in out.splitlines()[0], out
    assert ("  warning: IPython hooks of the notebook not restored: event <lambda> (TypeError: "
            "refuses pickling)") in out.splitlines(), out
    b.run("ran.clear()")
    assert b.run("print(len(ran), get_ipython().run_line_magic('<lambda>', 'abc'))").split() \
        == ["1", "cba"]


SESSION_WITH_LIBRARIES = r"""
import logging, random, warnings
import numpy as np, pandas as pd, torch
from tqdm.auto import tqdm
from IPython.core.magic import register_line_magic
tqdm.pandas()
register_line_magic(lambda line: line.upper())
logging.basicConfig(level=logging.INFO)
warnings.filterwarnings("ignore", category=DeprecationWarning)
random.seed(5); np.random.seed(5); torch.manual_seed(5)
model = torch.nn.Linear(4, 2); frame = pd.DataFrame({"a": range(4)})
print("." * 100_000)  # pyzmq sends it without a copy: its garbage thread starts (any big output)
"""

#: What a checkpoint must leave as it found it, as one JSON object; ``modules`` is compared
#: apart (a checkpoint imports its own machinery).
KERNEL_AS_IT_IS = r"""
def _kernel_as_it_is():
    import atexit, copyreg, gc, hashlib, json, logging, os, random, signal, sys, threading
    import warnings
    import numpy as np, torch
    from IPython.core import magic
    from kernel_hooks import registrations
    ip = get_ipython()
    lazy = getattr(magic, "LazyMagic", None)
    loggers = logging.root.manager.loggerDict.items()
    return json.dumps({
        "modules": sorted(sys.modules),
        "magics": {kind: sorted((name, type(m) is lazy) for name, m in table.items())
                   for kind, table in ip.magics_manager.magics.items()},
        "events": {event: [repr(c) for c in cs] for event, cs in ip.events.callbacks.items()},
        "printers": {mime: sorted(map(repr, f.type_printers))
                     for mime, f in ip.display_formatter.formatters.items()},
        "random": [hashlib.md5(repr(s).encode()).hexdigest() for s in
                   (random.getstate(), np.random.get_state(), torch.get_rng_state().tolist())],
        "threads": sorted(f"{t.name} {getattr(t, '_target', None)!r}"
                          for t in threading.enumerate()),
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if hasattr(s, "name")},
        "paths": [sys.path, list(map(repr, sys.meta_path)), list(map(repr, sys.path_hooks))],
        "environment": [dict(os.environ), os.getcwd()],
        "warnings": list(map(repr, warnings.filters)),
        "loggers": {name: [getattr(lg, "level", None), len(getattr(lg, "handlers", ()))]
                    for name, lg in loggers},
        "handlers": [logging.root.level, list(map(repr, logging.root.handlers))],
        "exit handlers": [atexit._ncallbacks(), [repr(f) for f, *_ in
                                                 registrations.registered("atexit")]],
        "reducers": sorted(map(repr, copyreg.dispatch_table)),
        "collector": [gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()],
        "interpreter": [sys.getrecursionlimit(), sys.getswitchinterval(), repr(sys.excepthook),
                        repr(sys.displayhook), repr(sys.gettrace()), repr(sys.getprofile())],
        "torch": [torch.get_num_threads(), str(torch.get_default_dtype()),
                  torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled()],
        "numpy": [np.geterr(), repr(np.get_printoptions())],
    })
print(_kernel_as_it_is())
"""


def test_a_checkpoint_leaves_the_kernel_as_it_found_it(start_kernel):
    """What a notebook with torch, pandas, tqdm, logging and a magic of its own sees is the same
    after ``%checkpoint`` as before: generators, threads, signal handlers, paths, environment,
    filters, loggers, exit handlers, reducers, the collector, torch's and numpy's switches, the
    shell's magics, callbacks and printers; the only new modules are the checkpoint's own
    machinery (this package, its dependencies, the standard library) and what a library
    imports of itself when asked (``torch.get_default_device`` imports ``torch.utils._device``),
    never another library.

    Found by this probe: IPython 9 keeps its own magics in the table as ``LazyMagic`` stand-ins
    until first used (IPython/core/magic.py: reading any attribute of one imports and registers
    the real magic). Looking for the notebook's magics asked each for ``__func__``: the first
    checkpoint loaded them all (about 100; 30 ms of a pause's fixed cost, issue 31 item 2) and
    changed the shell it was saving. The notebook's own magic is still found and travels."""
    a = start_kernel()
    a.run(SESSION_WITH_LIBRARIES)
    before = json.loads(a.run(KERNEL_AS_IT_IS))
    a.run("%checkpoint")
    after = json.loads(a.run(KERNEL_AS_IT_IS))
    own = {"kernel_hooks", "jupyter_gkeresume", "fsspec", "blake3", "xxhash", "psutil",
           "cloudpickle"}
    loaded = {name.partition(".")[0] for name in before["modules"]}
    new = [name for name in after["modules"] if name not in before["modules"]
           and name.partition(".")[0] not in own | set(sys.stdlib_module_names) | loaded]
    assert new == [], new
    for key in before.keys() - {"modules", "loggers"}:
        assert after[key] == before[key], key
    # a module imported by the checkpoint may add its own logger: those before stay as they were
    assert {name: after["loggers"][name] for name in before["loggers"]} == before["loggers"]
    a.kill()
    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out.splitlines()[0], out
    assert b.run("print(get_ipython().run_line_magic('<lambda>', 'abc'))").strip() == "ABC"


ONCE = r"""
import logging
from torch._logging._internal import warning_once
from torch.autograd.profiler import record_function
from transformers.utils import logging as hf_logging
logger = hf_logging.get_logger("transformers.probe")
logger.warning_once("`use_cache=True` is incompatible with gradient checkpointing")
logger.info_once("an info the level hides")
warning_once(logging.getLogger("torch._dynamo.probe"), "Profiler %s will be ignored", record_function)
logger.warning_once("with %s", "arguments")
"""


def test_messages_transformers_shows_once_are_not_shown_again(start_kernel):
    """transformers' ``logger.warning_once`` and ``info_once`` remember what they showed in a
    ``functools.lru_cache`` (transformers/utils/logging.py), not in Python's warning registry.
    After a resume, a training notebook showed its "``use_cache=True`` is incompatible with
    gradient checkpointing" and "``loss_type=None``" lines again (found by a probe). The cache's
    keys (a logger and plain arguments) travel; the resume calls the function again for each
    with its logger disabled, so it remembers them and shows nothing. So does dynamo's
    ``warning_once`` (torch/_logging/_internal.py), whose arguments may be a library's class
    ("Profiler record function <class ...> will be ignored" came again after a resume of a
    compiled training loop: a helper's probe)."""
    a = start_kernel()
    shown = a.run(ONCE)
    assert "incompatible with gradient checkpointing" in shown and "with arguments" in shown
    assert "Profiler <class 'torch.autograd.profiler.record_function'> will be ignored" in shown
    a.run("%checkpoint")
    a.kill()
    b = start_kernel()
    resumed = b.run("%resume")
    assert "incompatible" not in resumed and "(exact)" in resumed.splitlines()[0], resumed
    again = b.run("\n".join(ONCE.splitlines()[-4:]) + "\nlogger.warning_once('a new message')")
    assert "a new message" in again and "incompatible" not in again, again
    assert "with arguments" not in again and "will be ignored" not in again, again


def test_sys_path_comes_back_in_its_order(start_kernel, tmp_path):
    """Python imports the first ``which_copy`` on ``sys.path``: a notebook puts its own source
    first (``sys.path.insert(0, "src")``) to shadow an installed copy. The entries the session
    added came back appended to the end, so the installed copy won after a resume, and an entry
    the session had removed (here one from ``PYTHONPATH``) was there again, while the verdict
    said ``exact`` (found by a probe)."""
    first, last, env_dir = tmp_path / "first", tmp_path / "last", tmp_path / "from_env"
    for folder in (first, last, env_dir):
        folder.mkdir()
        (folder / "which_copy.py").write_text(f"WHERE = {folder.name!r}\n")
    env = {"PYTHONPATH": str(env_dir)}
    a = start_kernel(env)
    a.run(f"import sys, json\nsys.path.remove({str(env_dir)!r})\n"
          f"sys.path.insert(0, {str(first)!r})\nsys.path.append({str(last)!r})")
    observe = ("import which_copy, sys, json\n"
               f"print(json.dumps([which_copy.WHERE, sys.path[0], sys.path[-1], "
               f"{str(env_dir)!r} in sys.path]))")
    a.run("%checkpoint")
    assert a.run_json(observe) == ["first", str(first), str(last), False]
    a.kill()
    b = start_kernel(env)
    out = b.run("%resume")
    assert "(exact)" in out, out
    assert b.run_json(observe) == ["first", str(first), str(last), False]


def test_sys_argv_the_session_set_comes_back(start_kernel):
    """A notebook that runs a script's ``main()`` sets ``sys.argv`` for its ``argparse``
    (``sys.argv = ["train.py", "--lr", "0.1"]``): after a resume the parser read the resumed
    kernel's own arguments (``-f <connection file>``) and exited with status 2, under a verdict
    that named nothing else (found by a probe). It travels when the session set it; the
    kernel's own does not (it names the old kernel's connection file)."""
    parse = ("import argparse\nparser = argparse.ArgumentParser()\n"
             "parser.add_argument('--lr', type=float)\nprint(parser.parse_args().lr, sys.argv[0])")
    a = start_kernel()
    a.run("import sys\nsys.argv = ['train.py', '--lr', '0.1']")
    a.run("%checkpoint")
    assert a.run(parse) == "0.1 train.py\n"
    a.kill()
    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out, out
    assert b.run(parse) == "0.1 train.py\n"
    untouched = start_kernel()
    untouched.run("%checkpoint")
    own = untouched.run("import sys\nprint(sys.argv[-1])")
    untouched.kill()
    c = start_kernel()
    c.run("%resume")
    mine = c.run("import sys\nprint(sys.argv[-1])")
    assert mine != own and mine.strip().endswith(".json"), (mine, own)


EXIT_HANDLERS = r"""
import atexit

def save_results(path, text="saved"):
    with open(path, "a") as f:
        f.write(text + "\n")

atexit.register(save_results, {done!r}, text="results")
atexit.register(save_results, {dropped!r})
atexit.unregister(lambda: None)  # unregistering what was never registered changes nothing
"""


def test_the_sessions_exit_handlers_run_when_the_resumed_kernel_exits(start_kernel, tmp_path):
    """``atexit.register(save_results, ...)`` in a notebook runs at the kernel's clean exit. It
    was not carried (CPython keeps exit handlers where Python cannot list them), so after a
    resume the kernel's exit saved nothing, under an exact verdict (found by a probe). Each
    registration is noted as it is made (``kernel_hooks.registrations``), with its arguments;
    one unregistered is forgotten."""
    done, dropped = tmp_path / "done.txt", tmp_path / "dropped.txt"
    a = start_kernel()
    a.run(EXIT_HANDLERS.format(done=str(done), dropped=str(dropped)))
    a.run("atexit.unregister(save_results)\n"  # both of its registrations go
          f"atexit.register(save_results, {str(done)!r}, text='results')")
    a.run("%checkpoint")
    a.kill()  # the pod is gone: nothing ran at exit
    assert not done.exists()

    b = start_kernel()
    out = b.run("%resume")
    assert "(exact)" in out and "exit handlers" in out, out
    b.client.stop_channels()
    b.manager.shutdown_kernel(now=False)  # a clean exit runs the handlers
    assert done.read_text() == "results\n" and not dropped.exists()


LIBRARY_VALUES = r"""
import json, logging, sys
import tqdm
from PIL import Image, ImageFile
import PIL.Image

Image.MAX_IMAGE_PIXELS = None                  # a module's value, through an alias
PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True     # through the package
tqdm.tqdm.monitor_interval = 0                 # a class's value
logging.raiseExceptions, logging.logThreads = False, False

def configure(every):
    ImageFile.SAFEBLOCK += every               # in a function the notebook called

configure(1)
json.service_token = "ghp_" + "x" * 36         # looks like a credential: not saved
sys.tracebacklimit = 3                         # the interpreter's own value
sys.stdout = sys.stdout                        # the kernel's stream: stays the resumed kernel's
import mimetypes, pandas as pd
mimetypes.types_map[".gkr"] = "text/x-gkr"     # a library's containers changed in place
pd.DataFrame._metadata.append("source")        # (the list is NDFrame's)
mimetypes.types_map.pop(".gkr-gone", None)
"""
OBSERVE_LIBRARY_VALUES = r"""
import json, logging, mimetypes, sys, tqdm
import pandas as pd
from PIL import Image, ImageFile
print(json.dumps([Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES,
                  tqdm.tqdm.monitor_interval, logging.raiseExceptions, logging.logThreads,
                  ImageFile.SAFEBLOCK, hasattr(json, "service_token"),
                  getattr(sys, "tracebacklimit", None), mimetypes.guess_type("a.gkr")[0],
                  pd.DataFrame._metadata, pd.core.generic.NDFrame._metadata]))
"""


def test_values_the_cells_set_on_libraries_come_back(start_kernel):
    """A fresh kernel imports each library with the values it ships: what the cells assigned
    (``Image.MAX_IMAGE_PIXELS = None`` and ``ImageFile.LOAD_TRUNCATED_IMAGES = True`` in vision
    notebooks, tqdm's ``monitor_interval = 0``, ``logging.raiseExceptions = False``) was lost
    under an exact verdict (found by probes). The cells' own assignments name what the session
    set (``kernel_hooks.library_values``); a credential-looking value stays out, named. So
    were values set on ``sys`` (``sys.tracebacklimit``), which the entry left alone as a whole
    for the kernel's streams and ``sys.path``: now only those (and what other entries carry);
    and a library's containers changed in place (``mimetypes.types_map[k] = v``,
    ``pd.DataFrame._metadata.append``): their items go into the fresh library's own."""
    a = start_kernel()
    a.run(LIBRARY_VALUES)
    before = a.run_json(OBSERVE_LIBRARY_VALUES)
    assert before[:5] == [None, True, 0, False, False]
    assert before[6:] == [True, 3, "text/x-gkr", ["source"], ["source"]]
    out = a.run("%checkpoint")
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "values set on libraries" in out, out
    assert "json.service_token (looks like a credential: not saved)" in out, out
    assert "stdout" not in out, out
    assert b.run_json(OBSERVE_LIBRARY_VALUES) == [*before[:6], False, *before[7:]]


def _assert_not_carried(start_kernel, cell: str, entry: str) -> None:
    """A session that ran ``cell`` only resumes without ``entry`` in its report."""
    a = start_kernel()
    a.run(cell)
    _, out = resumed_elsewhere(a, start_kernel)
    assert entry not in out, out


FIGURE_FORMATS = r"""
def _figure_printers():
    import json
    from matplotlib.figure import Figure
    formatters = get_ipython().display_formatter.formatters
    return json.dumps(sorted(
        (mime, sorted(getattr(f.type_printers[Figure], "keywords", {})))
        for mime, f in formatters.items() if Figure in f.type_printers))

print(_figure_printers())
del _figure_printers
"""


def test_the_figure_formats_a_notebook_chose_come_back(start_kernel):
    """``backend_inline.set_matplotlib_formats("svg")`` (d2l's ``use_svg_display``, IPython's
    older ``IPython.display.set_matplotlib_formats``) registers the inline backend's figure
    printers with the shell's display formatters, not in ``%config``: after a resume figures
    showed as PNG again under an exact verdict (found by a probe). The printers come back as the
    session had them, after the backend; a session with the default PNG printer carries none."""
    _assert_not_carried(start_kernel, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                        "plt.show()", "matplotlib figure formats")

    a = start_kernel()
    a.run("import matplotlib.pyplot as plt\nfrom matplotlib_inline import backend_inline\n"
          "backend_inline.set_matplotlib_formats('svg', 'pdf', dpi=50)")
    expected = a.run_json(FIGURE_FORMATS)
    assert [mime for mime, _ in expected] == ["application/pdf", "image/svg+xml"], expected
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "matplotlib figure formats" in out, out
    assert b.run_json(FIGURE_FORMATS) == expected
    shown: list[str] = []
    b.client.execute_interactive(
        "plt.plot([1, 2])\nplt.show()", timeout=60,
        output_hook=lambda msg: shown.extend(msg["content"].get("data", {})))
    assert "image/svg+xml" in shown and "image/png" not in shown, shown


TORCH_SWITCHES = r"""
import json, logging, torch
from torch._logging import _internal
print(json.dumps([torch.utils.deterministic.fill_uninitialized_memory,
                  torch._C._is_multithreading_enabled(),
                  sorted(_internal.log_state.artifact_names),
                  logging.getLogger("torch._dynamo").level]))
"""


def test_torchs_log_settings_and_fill_switch_come_back(start_kernel):
    """``torch._logging.set_logs(recompiles=True, dynamo=logging.INFO)`` (torch.compile's
    tutorials ask for it to see recompilations) and ``torch.utils.deterministic.
    fill_uninitialized_memory = False`` (a module property over torch._C, which
    ``library_values`` cannot read from the module's ``__dict__``) and
    ``torch.autograd.set_multithreading_enabled(False)`` were lost under an exact verdict (found
    by probes)."""
    a = start_kernel()
    a.run("import logging, torch\n"
          "torch._logging.set_logs(recompiles=True, dynamo=logging.INFO)\n"
          "torch.utils.deterministic.fill_uninitialized_memory = False\n"
          "torch.autograd.set_multithreading_enabled(False)")
    expected = a.run_json(TORCH_SWITCHES)
    assert expected == [False, False, ["recompiles"], logging.INFO]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "torch settings" in out, out
    assert b.run_json(TORCH_SWITCHES) == expected


SHELL_SETTINGS = r"""
import json
from matplotlib_inline.backend_inline import InlineBackend
print(json.dumps([get_ipython().ast_node_interactivity, get_ipython().Completer.use_jedi,
                  InlineBackend.instance().close_figures, get_ipython().InteractiveTB.mode,
                  get_ipython().call_pdb]))
"""


def test_settings_assigned_to_the_shells_objects_come_back(start_kernel):
    """``get_ipython().ast_node_interactivity = "all"`` (show every expression of a cell),
    ``get_ipython().Completer.use_jedi = False`` (the usual fix for slow completion) and
    ``set_matplotlib_close(False)`` set traits of the shell's objects without ``%config``, so
    that entry's replay missed them: each was lost under an exact verdict (found by a probe).
    So were ``%xmode`` and ``%pdb`` called from code (``run_line_magic``), not typed: they set
    the shell's traceback printer, not a trait. A session that sets nothing carries nothing."""
    _assert_not_carried(start_kernel, "x = 1", "IPython settings")

    a = start_kernel()
    a.run("get_ipython().ast_node_interactivity = 'all'\n"
          "get_ipython().Completer.use_jedi = False\n"
          "from matplotlib_inline.backend_inline import set_matplotlib_close\n"
          "set_matplotlib_close(False)\n"
          "get_ipython().run_line_magic('xmode', 'Minimal')\n"
          "get_ipython().run_line_magic('pdb', 'on')")
    expected = a.run_json(SHELL_SETTINGS)
    assert expected == ["all", False, False, "Minimal", True]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "IPython settings" in out, out
    assert b.run_json(SHELL_SETTINGS) == expected
    assert b.run("1 + 1\n2 + 2") == "24"  # every expression shown, as before


def test_a_backend_chosen_before_pyplot_comes_back(start_kernel):
    """``matplotlib.use("Agg")`` before pyplot is imported (scripts and notebooks that draw to
    files do it first) was not carried, since the backend entry looked at pyplot only: after a
    resume pyplot took the kernel's inline backend and every figure displayed, under an exact
    verdict (found by a probe). A session that only imported matplotlib carries nothing."""
    _assert_not_carried(start_kernel, "import matplotlib", "matplotlib backend")
    a = start_kernel()
    a.run("import matplotlib\nmatplotlib.use('Agg')")
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "matplotlib backend" in out, out
    shown: list[str] = []
    b.client.execute_interactive(
        "import matplotlib.pyplot as plt\nprint(plt.get_backend().lower())\nplt.plot([1, 2])\n"
        "plt.show()", timeout=60, output_hook=lambda msg: shown.extend(
            {"stream": [msg["content"].get("text", "").strip()], "display_data": ["display"],
             "execute_result": ["result"]}.get(msg["msg_type"], [])))
    assert shown == ["agg"], shown  # nothing displayed: the figure stays with Agg


def test_datasets_switches_travel():
    """``datasets.disable_caching()`` (datasets/fingerprint.py ``_CACHING_ENABLED``) and
    ``datasets.disable_progress_bars()`` (datasets/utils/tqdm.py) flip module globals through a
    function, which no assignment in a cell shows: after a resume ``map`` cached again and the
    bars came back (docs/core.md listed it as not covered). Both are put back in a process that
    has them fresh."""
    import importlib

    import datasets
    from datasets import fingerprint

    datasets_bars = importlib.import_module("datasets.utils.tqdm")  # the module, not its class

    saved = fingerprint._CACHING_ENABLED, datasets_bars._hf_datasets_progress_bars_disabled

    def fresh():
        fingerprint._CACHING_ENABLED = True
        datasets_bars._hf_datasets_progress_bars_disabled = False

    try:
        fresh()
        assert library_state._hf_switches() is None
        datasets.disable_caching()
        datasets.disable_progress_bars()
        state = library_state._hf_switches()
        fresh()  # the resumed kernel
        assert library_state._restore_hf_switches(state) is None
        assert not datasets.is_caching_enabled() and datasets_bars.are_progress_bars_disabled()
    finally:
        fingerprint._CACHING_ENABLED, datasets_bars._hf_datasets_progress_bars_disabled = saved


def test_the_scikit_learn_config_travels():
    """``sklearn.set_config(transform_output="pandas")`` makes every transformer return a
    DataFrame; it lives in the thread's configuration (sklearn/_config.py), which nothing in the
    namespace holds: after a resume ``StandardScaler().fit_transform`` gave an ndarray again,
    under an exact verdict (found by a probe). What differs from a fresh import's defaults is put
    back; a session that changed nothing carries nothing."""
    import numpy as np
    import sklearn
    from sklearn.preprocessing import StandardScaler

    assert library_state._sklearn_config() is None
    try:
        sklearn.set_config(transform_output="pandas", assume_finite=True)
        state = library_state._sklearn_config()
        assert state == {"transform_output": "pandas", "assume_finite": True}
        sklearn.set_config(transform_output="default", assume_finite=False)  # the resumed kernel
        assert library_state._restore_sklearn_config(state) is None
        assert type(StandardScaler().fit_transform(np.ones((2, 2)))).__name__ == "DataFrame"
        assert library_state._restore_sklearn_config({"no_such_setting": 1}).startswith(
            "not accepted here: no_such_setting (")
    finally:
        sklearn.set_config(transform_output="default", assume_finite=False)


JOBLIB_SESSION = r"""
import json, joblib
from joblib.parallel import get_active_backend
joblib.parallel_config(backend="threading", n_jobs=3, verbose=2)  # no with: for the session
"""
OBSERVE_JOBLIB = r"""
backend, n_jobs = get_active_backend()
print(json.dumps([type(backend).__name__, n_jobs, joblib.parallel._backend.config["verbose"]]))
"""


def test_the_joblib_config_a_session_set_travels(start_kernel):
    """``joblib.parallel_config(backend="threading", n_jobs=3)`` called without ``with`` sets
    the thread's configuration (joblib/parallel.py ``parallel_config.__init__``), which
    scikit-learn's ``n_jobs`` and every ``Parallel()`` read and nothing in the namespace holds:
    after a resume the backend was loky again and ``n_jobs`` unset, under an exact verdict
    (noticed in stop 53). A fresh kernel carries nothing for it."""
    a = start_kernel()
    a.run("import joblib")
    _, out = resumed_elsewhere(a, start_kernel)
    assert "joblib parallel config" not in out, out
    a = start_kernel()
    a.run(JOBLIB_SESSION)
    expected = a.run_json(OBSERVE_JOBLIB)
    assert expected == ["ThreadingBackend", 3, 2]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "joblib parallel config" in out, out
    assert b.run_json(OBSERVE_JOBLIB) == expected


CATCHING_SESSION = r"""
import json, warnings
catching = warnings.catch_warnings(record=True)
caught = catching.__enter__()  # a cell enters, a later one exits
warnings.simplefilter("always")
warnings.warn("before the cut")
"""
OBSERVE_CATCHING = r"""
warnings.warn("after the cut")
catching.__exit__(None, None, None)
print(json.dumps([[str(w.message) for w in caught],
                  getattr(warnings._showwarnmsg_impl, "__module__", None)]))
"""


def test_warnings_recorded_by_a_catch_warnings_entered_by_hand_still_go_to_its_list(start_kernel):
    """``catch_warnings(record=True).__enter__()`` in one cell sends every warning to the list it
    returns (warnings.py: ``_showwarnmsg_impl = log.append``) until ``__exit__``. After a resume
    the warnings were printed instead and the list missed them, under an exact verdict (noticed
    in stop 53): the display function travels, as the list's own ``append``; ``__exit__`` puts
    warnings' own back."""
    a = start_kernel()
    a.run(CATCHING_SESSION)
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "warnings display" in out, out
    assert b.run(OBSERVE_CATCHING) == '[["before the cut", "after the cut"], "warnings"]\n'


FONTS_AND_UNITS = r"""
import json, shutil, matplotlib, matplotlib.units as munits, pandas as pd
from matplotlib import font_manager
shutil.copy(matplotlib.get_data_path() + "/fonts/ttf/DejaVuSans.ttf", FONT)
font_manager.fontManager.addfont(FONT)

class Kind:
    pass

class KindConverter(munits.ConversionInterface):
    pass

munits.registry[Kind] = KindConverter()
pd.plotting.register_matplotlib_converters()
"""
OBSERVE_FONTS_AND_UNITS = r"""
print(json.dumps([[entry.name for entry in font_manager.fontManager.ttflist if entry.fname == FONT],
                  type(munits.registry.get(Kind)).__name__,
                  type(munits.registry.get(pd.Period)).__name__]))
"""


def test_fonts_and_unit_converters_a_session_added_to_matplotlib_come_back(start_kernel,
                                                                           tmp_path):
    """``fontManager.addfont(path)`` (a notebook's own font for its figures) and the unit
    converters in ``matplotlib.units.registry`` (a class of the notebook's, pandas'
    ``register_matplotlib_converters``) live in matplotlib's singletons: after a resume the font
    was unknown and the converters gone, under an exact verdict (noticed in stop 53). A kernel
    that only imported them carries neither: matplotlib's own converters, the cached font list."""
    a = start_kernel()
    a.run("import matplotlib.pyplot, matplotlib.font_manager, pandas")
    _, out = resumed_elsewhere(a, start_kernel)
    assert "matplotlib fonts" not in out and "unit converters" not in out, out
    a = start_kernel()
    a.run(f"FONT = {str(tmp_path / 'Notebook.ttf')!r}\n{FONTS_AND_UNITS}")
    expected = a.run_json(OBSERVE_FONTS_AND_UNITS)
    assert expected == [["DejaVu Sans"], "KindConverter", "PeriodConverter"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert "matplotlib fonts" in out and "matplotlib unit converters" in out, out
    assert b.run_json(OBSERVE_FONTS_AND_UNITS) == expected


NESTED_RUN = r"""
import asyncio
try:
    print(asyncio.run(asyncio.sleep(0, result="nested run")))
except RuntimeError as exc:  # the kernel's own loop is running
    print(exc)
"""


def test_asyncio_made_reentrant_by_nest_asyncio_stays_reentrant(start_kernel):
    """``nest_asyncio.apply()`` (``nest_asyncio2``, ipykernel's own dependency, is the same) is
    how notebooks call ``asyncio.run`` inside a cell: it patches asyncio and the kernel's running
    loop. After a resume the loop was unpatched and ``asyncio.run`` raised again, under an exact
    verdict (found by a probe); ``apply()`` is called again at resume."""
    a = start_kernel()
    a.run("import nest_asyncio2\nnest_asyncio2.apply()")
    assert a.run(NESTED_RUN) == "nested run\n"
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "nest_asyncio" in out, out
    assert b.run(NESTED_RUN) == "nested run\n"


BLAS_LIMIT = r"""
import json, numpy
from threadpoolctl import threadpool_info, threadpool_limits
_ = threadpool_limits(limits=LIMIT, user_api="blas")  # no with: for the session
"""
OBSERVE_BLAS_LIMIT = r"""
print(json.dumps([pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]))
"""


def test_a_blas_thread_limit_the_session_set_travels(start_kernel):
    """``threadpool_limits(limits=1)`` without ``with`` sets the BLAS library's thread count (in C:
    nothing in the namespace holds it); after a resume NumPy's BLAS ran on every core again, under
    an exact verdict (a helper's probe); a count can change a product's last bits. A count that
    is a fresh process's (the CPUs or cores, what ``OMP_NUM_THREADS`` asks: 1 in these kernels)
    does not travel, so the session here picks one more than the CPUs."""
    limit = len(os.sched_getaffinity(0)) + 1
    a = start_kernel()
    a.run(BLAS_LIMIT.replace("LIMIT", str(limit)))
    expected = a.run_json(OBSERVE_BLAS_LIMIT)
    assert expected and set(expected) == {limit}
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "BLAS and OpenMP threads" in out, out
    assert b.run_json(OBSERVE_BLAS_LIMIT) == expected


def test_the_input_log_and_the_directory_stack_come_back(start_kernel, tmp_path):
    """``%logstart`` logs every cell's input to a file until ``%logstop``; ``%pushd`` keeps a
    directory stack for ``%popd``. After a resume the log had stopped (``%logstop``: "Logging
    hadn't been started", the later cells missing from the file) and ``%popd`` found an empty
    stack, under an exact verdict (a helper's probe). The log goes on in its file, found by its
    absolute path although the working directory moved; the stack comes back."""
    (tmp_path / "sub").mkdir()
    home = {"GKERESUME_ROOT_DIR": str(tmp_path)}  # the log is on the home volume
    a = start_kernel(env=home)
    a.run(f"import os, json\nos.chdir({str(tmp_path)!r})\n"
          "get_ipython().run_line_magic('logstart', '-o inputs.py')")
    a.run("get_ipython().run_line_magic('pushd', 'sub')\nbefore_cut = 1")
    b, out = resumed_elsewhere(a, lambda: start_kernel(env=home))
    assert "(exact)" in out.splitlines()[0] and "input log and directory stack" in out, out
    b.run("after_cut = 2")
    assert b.run_json("get_ipython().run_line_magic('logstop', '')\n"
                      "print(json.dumps(os.path.basename(os.getcwd())))") == "sub"
    log = (tmp_path / "inputs.py").read_text()
    assert log.count("before_cut = 1") == 1 and log.count("after_cut = 2") == 1, log
    b.run("get_ipython().run_line_magic('popd', '')")
    assert b.run_json("print(json.dumps(os.getcwd()))") == str(tmp_path)


def test_future_imports_and_the_notebooks_profile_function_come_back(start_kernel):
    """``from __future__ import annotations`` in a cell holds for every later cell (IPython's
    compiler keeps the flag), and ``sys.setprofile(fn)`` for every later call: after a resume a
    cell annotating with a name defined later raised ``NameError`` and the profile function was
    gone, under an exact verdict (found by a probe)."""
    a = start_kernel()
    a.run("from __future__ import annotations\nimport json, sys\ncalls = []\n"
          "def count(frame, event, arg):\n    calls.append(event)\n")
    a.run("sys.setprofile(count)")
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert "future imports" in out and "trace and profile functions" in out, out
    later = "def f(x: DefinedLater) -> None:\n    pass\nprint(json.dumps(f.__annotations__))"
    assert b.run_json(later) == {"x": "DefinedLater", "return": "None"}
    assert b.run_json("sys.setprofile(None)\nprint(json.dumps(sys.getprofile() is None and "
                      "'call' in calls))") is True


def test_torch_modes_left_entered_are_named(tmp_path, monkeypatch):
    """``mode.__enter__()`` in one cell and the exit in a later one (a ``TorchFunctionMode`` of
    the notebook's, ``FlopCounterMode``, ``saved_tensors_hooks``, forward AD's ``dual_level``):
    the modes are the thread's state, none of it in the namespace, and after a resume they were
    off under an exact verdict (the flop counter counted nothing; found by a probe). They are
    named; the default device's own mode is "torch settings"' and is not."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils.flop_counter import FlopCounterMode

    import kernel_hooks

    class Counting(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "interpreter-state-key-" + "5" * 32)
    assert library_state._torch_modes() is None
    with FlopCounterMode(display=False):  # its module hooks are global: gone before the resume
        assert library_state._torch_modes() == ["_FlopCounterMode"]
    entered = [Counting(), torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t),
               torch.autograd.forward_ad.dual_level()]
    for mode in entered:
        mode.__enter__()
    try:
        with torch.device("cpu"):  # a DeviceContext on the stack, as set_default_device leaves
            assert library_state._torch_modes() == ["Counting", "saved_tensors_hooks",
                                                    "forward_ad.dual_level"]
            kernel_hooks.checkpoint(namespace={"x": 1}, store=str(tmp_path), workspace="ws")
    finally:
        for mode in reversed(entered):
            mode.__exit__(None, None, None)
    report = kernel_hooks.resume(namespace={}, store=str(tmp_path), workspace="ws")
    assert report.verdict["level"] == "partial", report.verdict
    assert ("torch modes left entered not restored: not entered again: Counting, "
            "saved_tensors_hooks, forward_ad.dual_level (entered in a cell and still open at "
            "the pause: enter it again after the resume)") in report.warnings, report.warnings


def test_the_global_autocast_switches_travel():
    """``torch.set_autocast_enabled("cpu", True)``, ``set_autocast_dtype`` and
    ``set_autocast_cache_enabled(False)`` set the thread's autocast state outside any
    ``autocast`` block: after a resume matmuls ran in float32 again, under an exact verdict
    (found by a probe). They are part of "torch settings"; untouched, nothing travels."""
    import torch

    assert "autocast" not in (library_state._torch_settings() or {})
    try:
        torch.set_autocast_dtype("cpu", torch.float16)
        torch.set_autocast_enabled("cpu", True)
        torch.set_autocast_cache_enabled(False)
        state = library_state._torch_settings()
        assert state["autocast"] == ({"cpu": (True, torch.float16),
                                      "cuda": (False, torch.float16)}, False)
        torch.set_autocast_enabled("cpu", False)  # the resumed kernel's
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        torch.set_autocast_cache_enabled(True)
        assert library_state._restore_torch_settings(state) is None
        a = torch.ones(2, 2)
        assert (a @ a).dtype == torch.float16 and not torch.is_autocast_cache_enabled()
    finally:
        torch.set_autocast_enabled("cpu", False)
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        torch.set_autocast_cache_enabled(True)
