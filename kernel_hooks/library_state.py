"""Built-in ``interpreter_state`` entries for libraries: matplotlib (backend, colormaps, fonts, unit
converters, rcParams, open figures), numpy (print options, ``seterr``), pandas options,
scikit-learn's and joblib's configuration, asyncio made reentrant by ``nest_asyncio``, torch
global settings (default dtype and device, grad mode, determinism, cuDNN and matmul precision
flags, attention backends, print options, ...), what the session set on torch's config modules
(``torch._dynamo.config``, ...), the hooks it registered for every module or optimizer,
torch.distributed's default process group, the Hugging Face libraries' switches (progress bars,
datasets' caching) and the messages transformers showed once (``warning_once``), the interpreter's
own settings (recursion limit, ``decimal`` context, collector thresholds, multiprocessing's start
method, umask), the signal handlers the session set, ``warnings`` filters and display functions
and ``logging`` configuration.

Each entry is ``(name, capture, restore)`` as ``interpreter_state.register_state`` takes it:
``capture()`` returns ``None`` when the library is not loaded (``sys.modules``, never an import)
or nothing differs from what a fresh kernel has; ``restore(state)`` returns ``None`` or what it
could not restore. ``remember_baseline()`` (when the extension loads) records the warnings
filters and logging configuration a fresh kernel has, so only the session's changes travel.
"""

from __future__ import annotations

import _tracemalloc
import contextlib
import faulthandler
import functools
import gc
import importlib
import locale
import logging
import os
import signal
import socket
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

from . import collector, local_modules, registrations
from .ipython_state import the_shell

_baseline: dict[str, Any] = {}


def remember_baseline() -> None:
    """Record the warnings filters and display functions and the loggers' configuration as
    they are now (idempotent)."""
    if not _baseline:
        _baseline["warnings"] = list(warnings.filters)
        _baseline["warnings_display"] = _warnings_display_now()
        _baseline["logging"] = {name: _logger_facts(logger) for name, logger in _loggers().items()}


# -- matplotlib ------------------------------------------------------------------------------

#: The module of ipykernel's default backend: importing it registers the display formatters
#: that show a figure as an image (matplotlib_inline/backend_inline.py,
#: ``_enable_matplotlib_integration``).
INLINE_MODULE = "matplotlib_inline.backend_inline"


def _matplotlib_backend() -> Any:
    """The pyplot backend and interactive mode (the ``%matplotlib`` choice), and whether the
    backend was loaded (the first plot loads it); None when it is what a kernel starts with
    (``MPLBACKEND``, interactive: ipykernel's inline backend) and not loaded yet. Before pyplot
    is imported, only a backend chosen with ``matplotlib.use`` (``"pyplot": False``)."""
    if "matplotlib.pyplot" not in sys.modules:
        backend = getattr(sys.modules.get("matplotlib"), "rcParams", None)
        backend = backend._get_backend_or_none() if backend is not None else None
        if not backend or backend.lower() == os.environ.get("MPLBACKEND", "").lower():
            return None
        return {"backend": backend, "pyplot": False}
    import matplotlib

    backend = matplotlib.rcParams._get_backend_or_none()
    interactive = matplotlib.is_interactive()
    loaded = INLINE_MODULE in sys.modules
    if interactive and (backend or "").lower() == os.environ.get("MPLBACKEND", "").lower():
        # what a fresh kernel chooses; once the inline backend is loaded, a figure displays as
        # an image, which a resumed kernel that only unpickles figures would not do
        return {"backend": None, "interactive": True, "loaded": True} if loaded else None
    return {"backend": backend, "interactive": interactive, "loaded": loaded}


def _restore_matplotlib_backend(state: dict[str, Any]) -> str | None:
    import matplotlib

    backend = state["backend"]
    if not state.get("pyplot", True):  # matplotlib.use before pyplot: pyplot takes it later
        matplotlib.use(backend)
        return None
    if backend and backend.lower() != (matplotlib.rcParams._get_backend_or_none() or "").lower():
        shell = the_shell()
        if shell is None:
            import matplotlib.pyplot as plt

            plt.switch_backend(backend)
        else:  # what %matplotlib does, less the GUI event loop
            from IPython.core.pylabtools import activate_matplotlib
            from matplotlib_inline.backend_inline import configure_inline_support

            activate_matplotlib(backend)
            configure_inline_support(shell, backend)
    elif state.get("loaded"):  # as the session's first plot did
        import matplotlib.pyplot as plt

        plt._get_backend_mod()
    matplotlib.interactive(state["interactive"])
    return None


def _figure_formats() -> Any:
    """The shell's figure printers by MIME type (``set_matplotlib_formats("svg")`` registers
    them with the display formatters, not in ``%config``), unless they are the inline backend's
    default: PNG only, with ``InlineBackend.print_figure_kwargs``."""
    figure, inline, shell = (sys.modules.get("matplotlib.figure"), sys.modules.get(INLINE_MODULE),
                             the_shell())
    if figure is None or inline is None or shell is None:
        return None
    printers = {mime: formatter.type_printers[figure.Figure]
                for mime, formatter in shell.display_formatter.formatters.items()
                if figure.Figure in formatter.type_printers}
    png = printers.get("image/png")
    default = {"fmt": "png", "base64": True, **inline.InlineBackend.instance().print_figure_kwargs}
    if list(printers) == ["image/png"] and getattr(png, "keywords", None) == default:
        return None
    return printers


def _restore_figure_formats(printers: dict[str, Any]) -> str | None:
    """After the backend entry (whose inline backend registers its default printers)."""
    from matplotlib.figure import Figure

    formatters = the_shell().display_formatter.formatters
    for formatter in formatters.values():
        formatter.pop(Figure, None)
    missing = [mime for mime in printers if mime not in formatters]
    for mime, printer in printers.items():
        if mime in formatters:
            formatters[mime].for_type(Figure, printer)
    return f"no display formatter here for {', '.join(missing)}" if missing else None


_NOT_RC = frozenset({"backend", "backend_fallback"})  # the backend entry owns these


def _matplotlib_colormaps() -> Any:
    """The colormaps registered besides matplotlib's own (``matplotlib.colormaps.register``; a
    library that registers its own when imported, seaborn, is carried too: it does no harm)."""
    registry = getattr(sys.modules.get("matplotlib"), "colormaps", None)
    builtin = getattr(registry, "_builtin_cmaps", None)
    if builtin is None:
        return None
    added = {name: registry[name] for name in list(registry) if name not in builtin}
    return added or None


def _restore_matplotlib_colormaps(added: dict[str, Any]) -> str | None:
    import matplotlib

    refused = []
    for name, colormap in added.items():
        try:
            matplotlib.colormaps.register(colormap, name=name, force=True)
        except ValueError as exc:  # a built-in name in this matplotlib
            refused.append(f"{name} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


def _matplotlib_fonts() -> Any:
    """The font files the session added (``font_manager.fontManager.addfont(path)``): those the
    font list holds and the list matplotlib caches for every fresh process
    (``fontlist-v<version>.json``, read as ``_load_fontmanager`` reads it) does not. None when
    that list cannot be read: then nothing tells the session's fonts from the system's."""
    font_manager = sys.modules.get("matplotlib.font_manager")
    manager = getattr(font_manager, "fontManager", None)
    if manager is None:
        return None
    import matplotlib

    cached_path = os.path.join(matplotlib.get_cachedir(),
                               f"fontlist-v{font_manager.FontManager.__version__}.json")
    try:
        cached = font_manager.json_load(cached_path)
    except (OSError, ValueError):
        return None
    known = {entry.fname for entry in (*cached.ttflist, *cached.afmlist)}
    added = [entry.fname for entry in (*manager.ttflist, *manager.afmlist)
             if entry.fname not in known]
    return list(dict.fromkeys(added)) or None


def _restore_matplotlib_fonts(paths: list[str]) -> str | None:
    from matplotlib import font_manager

    manager = font_manager.fontManager
    known = {entry.fname for entry in (*manager.ttflist, *manager.afmlist)}
    lost = []
    for path in paths:
        if path in known:
            continue
        try:
            manager.addfont(path)
        except (OSError, RuntimeError) as exc:  # the file is gone, or no font
            lost.append(f"{path} ({exc})")
    return f"fonts not added: {', '.join(lost)}" if lost else None


def _matplotlib_units() -> Any:
    """The unit converters registered besides matplotlib's own (``matplotlib.units.registry[Kind]
    = Converter()``, ``pd.plotting.register_matplotlib_converters()``): by the type they
    convert."""
    units = sys.modules.get("matplotlib.units")
    registry = getattr(units, "registry", None)
    if registry is None:
        return None
    added = {kind: converter for kind, converter in list(registry.items())
             if not type(converter).__module__.startswith("matplotlib.")}
    return added or None


def _restore_matplotlib_units(added: dict[type, Any]) -> str | None:
    from matplotlib import units

    units.registry.update(added)
    return None


def _matplotlib_rc() -> Any:
    if "matplotlib" not in sys.modules:
        return None
    import matplotlib

    original = matplotlib.rcParamsOrig
    changed = {key: value for key, value in matplotlib.rcParams.items()
               if key not in _NOT_RC and _differs(value, original.get(key))}
    return changed or None


def _restore_matplotlib_rc(changed: dict[str, Any]) -> str | None:
    import matplotlib

    refused = []
    for key, value in changed.items():
        try:
            matplotlib.rcParams[key] = value
        except (KeyError, ValueError) as exc:
            refused.append(f"{key} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


def _matplotlib_figures() -> Any:
    """pyplot's open figures by number, in pyplot's order (the current one last)."""
    if "matplotlib.pyplot" not in sys.modules:
        return None
    from matplotlib._pylab_helpers import Gcf

    figures = [(manager.num, manager.canvas.figure) for manager in Gcf.figs.values()]
    return figures or None


def _restore_matplotlib_figures(figures: list[tuple[Any, Any]]) -> str | None:
    """Each figure under its own number, with a manager of this kernel's backend, the last one
    current (unpickling a figure pyplot managed registers it again under a new number: that
    registration is replaced)."""
    import matplotlib.pyplot as plt
    from matplotlib._pylab_helpers import Gcf

    for _num, figure in figures:
        for num, manager in list(Gcf.figs.items()):
            if manager.canvas.figure is figure:
                del Gcf.figs[num]
    backend = plt._get_backend_mod()  # as Figure.__setstate__ does
    for num, figure in figures:
        plt.close(num)  # a figure of this kernel under the same number gives way
        Gcf._set_new_active_manager(backend.new_figure_manager_given_figure(num, figure))
    # The inline backend shows and closes, when the cell ends, the figures drawn in it:
    # Figure.__setstate__ asked for a draw the session never made (those figures were open).
    show = getattr(backend, "show", None)
    if getattr(show, "_draw_called", False):
        show._draw_called, show._to_draw = False, []
    return None


def _differs(value: Any, other: Any) -> bool:
    try:
        return bool(value != other)
    except (TypeError, ValueError):  # e.g. arrays: compared element-wise
        return value is not other


# -- numpy -----------------------------------------------------------------------------------

_NUMPY_ERR_DEFAULT = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}
_NUMPY_BUFSIZE = 8192  # numpy's ufunc buffer size, as a fresh numpy has it (``np.setbufsize``)


def _numpy_options() -> Any:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return None
    state = {"print": numpy.get_printoptions(), "err": numpy.geterr(),
             "errcall": numpy.geterrcall(), "bufsize": numpy.getbufsize()}
    default = _numpy_print_defaults(numpy)
    if (not _differs(state["print"], default) and state["err"] == _NUMPY_ERR_DEFAULT
            and state["errcall"] is None and state["bufsize"] == _NUMPY_BUFSIZE):
        return None
    return state


def _numpy_print_defaults(numpy: Any) -> dict[str, Any] | None:
    """A fresh numpy's print options as ``get_printoptions`` spells them (None if unknown)."""
    try:
        from numpy._core.printoptions import default_format_options_dict as defaults
    except ImportError:
        return None
    return {**defaults, "legacy": False}


def _restore_numpy_options(state: dict[str, Any]) -> str | None:
    import numpy

    numpy.set_printoptions(**state["print"])
    numpy.seterr(**state["err"])
    numpy.seterrcall(state.get("errcall"))  # older snapshots have none
    numpy.setbufsize(state.get("bufsize", _NUMPY_BUFSIZE))
    return None


def _scipy_special_errors() -> Any:
    """What ``scipy.special.seterr`` changed (``seterr(all="raise")``: a singular ``gammaln``
    raises): a switch in scipy's C code, against a fresh import's (every kind ignored but
    ``memory``, scipy/special/sf_error.c)."""
    special = sys.modules.get("scipy.special")
    geterr = getattr(special, "geterr", None)
    if geterr is None:
        return None
    now = geterr()
    fresh = {kind: "raise" if kind == "memory" else "ignore" for kind in now}
    return now if now != fresh else None


def _restore_scipy_special_errors(errors: dict[str, str]) -> str | None:
    import scipy.special

    try:
        scipy.special.seterr(**errors)
    except (TypeError, ValueError) as exc:  # a kind this scipy does not know
        return f"not accepted here: {exc}"
    return None


# -- scikit-learn ----------------------------------------------------------------------------

def _sklearn_config() -> Any:
    """What ``sklearn.set_config`` (or ``config_context`` left entered) changed: the calling
    thread's configuration against the defaults a fresh import starts from
    (``sklearn._config._global_config``, which ``set_config`` leaves as it is):
    ``transform_output="pandas"`` makes every transformer return a DataFrame."""
    config = sys.modules.get("sklearn._config")
    if config is None:
        return None
    defaults = getattr(config, "_global_config", {})
    changed = {key: value for key, value in config.get_config().items()
               if key in defaults and _differs(value, defaults[key])}
    return changed or None


def _restore_sklearn_config(changed: dict[str, Any]) -> str | None:
    import sklearn

    refused = []
    for key, value in changed.items():
        try:
            sklearn.set_config(**{key: value})
        except Exception as exc:  # a setting this scikit-learn does not know
            refused.append(f"{key} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- joblib ----------------------------------------------------------------------------------

def _joblib_config() -> Any:
    """What ``joblib.parallel_config(backend="threading", n_jobs=4)`` called without ``with``
    (or ``parallel_backend``, or one left entered) set: the calling thread's configuration
    (``joblib.parallel._backend.config``), the keys that are no longer the default markers; the
    backend as the object joblib made of its name. scikit-learn's ``n_jobs=-1`` reads it."""
    parallel = sys.modules.get("joblib.parallel")
    config = getattr(getattr(parallel, "_backend", None), "config", None)
    if not config:
        return None
    defaults = parallel.default_parallel_config
    changed = {key: value for key, value in config.items() if value is not defaults.get(key)}
    return changed or None


def _restore_joblib_config(changed: dict[str, Any]) -> str | None:
    import joblib

    try:
        joblib.parallel_config(**changed)
    except (TypeError, ValueError) as exc:  # a key or backend this joblib does not know
        return f"not accepted here: {exc}"
    return None


# -- BLAS and OpenMP thread pools -------------------------------------------------------------

#: The environment variables the BLAS and OpenMP libraries read their thread count from.
THREAD_COUNT_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                          "BLIS_NUM_THREADS")


def _thread_pools() -> Any:
    """The thread counts of the BLAS and OpenMP libraries loaded, by library (threadpoolctl's
    ``prefix``), that are not a fresh process's: neither the CPUs or cores this process may run
    on nor what the environment asks (``threadpool_limits(limits=1)`` called without ``with``,
    as scikit-learn's docs show; a count can change a BLAS result's last bits). Only when
    threadpoolctl is loaded (scikit-learn imports it): it reads the libraries through ctypes."""
    threadpoolctl = sys.modules.get("threadpoolctl")
    if threadpoolctl is None:
        return None
    fresh = _cpu_counts() | {int(os.environ[name]) for name in THREAD_COUNT_VARIABLES
                             if os.environ.get(name, "").isdigit()}
    chosen = {pool["prefix"]: pool["num_threads"] for pool in threadpoolctl.threadpool_info()
              if pool["num_threads"] not in fresh}
    return chosen or None


def _restore_thread_pools(chosen: dict[str, int]) -> str | None:
    import threadpoolctl

    threadpoolctl.threadpool_limits(limits=chosen)
    here = {pool["prefix"] for pool in threadpoolctl.threadpool_info()}
    missing = sorted(set(chosen) - here)
    return f"not loaded here: {', '.join(missing)}" if missing else None


# -- nest_asyncio ----------------------------------------------------------------------------

#: The packages whose ``apply()`` makes asyncio reentrant (``asyncio.run`` inside a cell, whose
#: kernel runs an event loop), each marking ``asyncio._nest_patched``.
NEST_ASYNCIO = ("nest_asyncio", "nest_asyncio2")


def _nest_asyncio() -> Any:
    """Which of ``NEST_ASYNCIO`` patched asyncio (``nest_asyncio.apply()``): it patches asyncio's
    functions and the kernel's running loop, which a fresh kernel has unpatched."""
    if not hasattr(sys.modules.get("asyncio"), "_nest_patched"):
        return None
    return next((name for name in NEST_ASYNCIO if name in sys.modules), None)


def _restore_nest_asyncio(name: str) -> str | None:
    try:
        importlib.import_module(name).apply()
    except Exception as exc:  # not installed here, or refused
        return f"{name}.apply() ({type(exc).__name__}: {exc})"
    return None


# -- pandas ----------------------------------------------------------------------------------

def _pandas_options() -> Any:
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return None
    changed = {}
    with warnings.catch_warnings():  # reading a deprecated option warns: not the user's doing
        warnings.simplefilter("ignore")
        for key, option in pandas._config.config._registered_options.items():
            try:
                value = pandas.get_option(key)
            except Exception:  # a removed option
                continue
            if _differs(value, option.defval):
                changed[key] = value
    return changed or None


def _restore_pandas_options(changed: dict[str, Any]) -> str | None:
    import pandas

    refused = []
    for key, value in changed.items():
        try:
            pandas.set_option(key, value)
        except Exception as exc:  # an option this pandas does not know
            refused.append(f"{key} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- torch -----------------------------------------------------------------------------------

#: ``torch.set_printoptions``' fields (torch/_tensor_str.py ``PRINT_OPTS``: the class holds the
#: defaults, the setter writes the instance).
#: The device types whose global autocast switches travel, with a fresh torch's dtype for each.
AUTOCAST = {"cpu": "bfloat16", "cuda": "float16"}
TORCH_PRINT_FIELDS = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")
#: ``torch.backends.cuda.matmul`` flags (torch/backends/cuda/__init__.py), with a fresh value.
TORCH_MATMUL_FLAGS = {"allow_fp16_reduced_precision_reduction": True,
                      "allow_bf16_reduced_precision_reduction": True,
                      "allow_fp16_accumulation": False}
#: torch's per-backend float32 precision (torch >= 2.9: ``torch.backends.cuda.matmul.
#: fp32_precision = "tf32"``, the API its docs now give for TF32), as a fresh process has it. Once
#: a session sets one, the legacy getters (``get_float32_matmul_precision``, ``cudnn.allow_tf32``)
#: raise: these travel instead. Parents before children (a child at "none" follows its parent).
TORCH_FP32_PRECISION = {"": "none", "cuda": "none", "cuda.matmul": "none", "cudnn": "none",
                        "cudnn.conv": "tf32", "cudnn.rnn": "tf32", "mkldnn": "none",
                        "mkldnn.matmul": "none", "mkldnn.conv": "none", "mkldnn.rnn": "none"}
#: The scaled-dot-product attention backends (``torch.backends.cuda.<kind>_sdp_enabled``).
TORCH_SDP_KINDS = ("flash", "mem_efficient", "math", "cudnn")


def _backend(torch: Any, path: str) -> Any:
    """``torch.backends`` or the backend at ``path`` below it (``"cuda.matmul"``), or None."""
    backend = torch.backends
    for part in filter(None, path.split(".")):
        backend = getattr(backend, part, None)
    return backend


def _torch_settings_now(torch: Any) -> dict[str, Any]:
    cudnn, cuda = torch.backends.cudnn, torch.backends.cuda
    get_default_device = getattr(torch, "get_default_device", None)  # torch >= 2.3
    now = {
        "default_dtype": torch.get_default_dtype(),
        "default_device": str(get_default_device()) if get_default_device else "cpu",
        "grad_enabled": torch.is_grad_enabled(),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "cudnn": {"enabled": cudnn.enabled, "benchmark": cudnn.benchmark,
                  "deterministic": cudnn.deterministic},
        "cuda_matmul": {flag: getattr(cuda.matmul, flag) for flag in TORCH_MATMUL_FLAGS
                        if hasattr(cuda.matmul, flag)},
        "sdp": {kind: getattr(cuda, f"{kind}_sdp_enabled")() for kind in TORCH_SDP_KINDS
                if hasattr(cuda, f"{kind}_sdp_enabled")},
        "print_options": {field: getattr(torch._tensor_str.PRINT_OPTS, field)
                          for field in TORCH_PRINT_FIELDS},
        "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        "num_threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.enabled,
        "opt_einsum": (torch.backends.opt_einsum.enabled, torch.backends.opt_einsum.strategy),
        "warn_always": torch.is_warn_always_enabled(),
        # torch has no getter: with it set, a subnormal float32 comes out as zero (x86 only)
        "flush_denormal": torch.tensor([1e-40], dtype=torch.float32, device="cpu").item() == 0.0,
    }
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4: set_autocast_enabled("cpu", True)
        now["autocast"] = ({device: (torch.is_autocast_enabled(device),
                                     torch.get_autocast_dtype(device)) for device in AUTOCAST},
                           torch.is_autocast_cache_enabled())
    if hasattr(torch._C, "_is_multithreading_enabled"):  # set_multithreading_enabled(False)
        now["autograd_multithreading"] = torch._C._is_multithreading_enabled()
    if hasattr(torch._C, "_check_sparse_tensor_invariants"):  # check_sparse_tensor_invariants.enable()
        now["sparse_invariants"] = torch._C._check_sparse_tensor_invariants()
    now["interop_threads"] = torch.get_num_interop_threads()
    now["quantized_engine"] = torch.backends.quantized.engine  # "qnnpack" for mobile recipes
    now["mkldnn_deterministic"] = getattr(torch.backends.mkldnn, "deterministic", False)
    now["nnpack"] = torch._C._get_nnpack_enabled()
    now["backcompat_warnings"] = (torch.utils.backcompat.broadcast_warning.enabled,
                                  torch.utils.backcompat.keepdim_warning.enabled)
    now["jit"] = _torch_jit_switches(torch)
    if hasattr(torch._C, "_get_math_sdp_allow_fp16_bf16_reduction"):  # math attention's fp16
        now["math_sdp_reduction"] = torch._C._get_math_sdp_allow_fp16_bf16_reduction()
    if hasattr(torch._C, "_warn_on_accumulate_grad_stream_mismatch"):
        now["grad_stream_warning"] = torch._C._warn_on_accumulate_grad_stream_mismatch()
    if hasattr(torch.backends, "mha"):  # torch.backends.mha.set_fastpath_enabled(False)
        now["mha_fastpath"] = torch.backends.mha.get_fastpath_enabled()
    stance = getattr(sys.modules.get("torch._dynamo.eval_frame"), "_stance", None)
    if stance is not None:  # torch.compiler.set_stance("force_eager") outside a with
        now["compiler_stance"] = (stance.stance, stance.skip_guard_eval_unsafe, stance.backend)
    distribution = sys.modules.get("torch.distributions.distribution")
    if distribution is not None:  # Distribution.set_default_validate_args(False)
        now["validate_args"] = distribution.Distribution._validate_args
    if hasattr(torch._C, "_get_deterministic_fill_uninitialized_memory"):
        now["fill_uninitialized_memory"] = torch._C._get_deterministic_fill_uninitialized_memory()
    logs = sys.modules.get("torch._logging._internal")
    if logs is not None and "TORCH_LOGS" not in os.environ:  # with it set, set_logs does nothing
        now["logs"] = (dict(logs.log_state.log_qname_to_level), sorted(logs.log_state.artifact_names))
    sharing = sys.modules.get("torch.multiprocessing")
    if sharing is not None:  # how tensors go to DataLoader workers ("file_system": too many fds)
        now["sharing_strategy"] = sharing.get_sharing_strategy()
    hub = sys.modules.get("torch.hub")
    if hub is not None:  # torch.hub.set_dir: set, it wins over $TORCH_HOME
        now["hub_dir"] = vars(hub).get("_hub_dir")
    future = torch.__future__  # conversions (module.to(), _apply) swap or overwrite parameters
    if hasattr(future, "get_swap_module_params_on_conversion"):
        now["future"] = (future.get_overwrite_module_params_on_conversion(),
                         future.get_swap_module_params_on_conversion())
    try:  # the float32 precision as the session set it: the legacy API's view, if it has one
        now["cudnn"]["allow_tf32"] = cudnn.allow_tf32
        now["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    except RuntimeError:  # "mix of the legacy and new APIs": the per-backend settings are it
        now["cudnn"].pop("allow_tf32", None)
        now["fp32_precision"] = {path: _backend(torch, path).fp32_precision
                                 for path in TORCH_FP32_PRECISION
                                 if hasattr(_backend(torch, path), "fp32_precision")}
    return now


#: TorchScript's process-wide switches, each ``(getter, setter, fresh value)``; a getter of
#: None reads the value by setting it (``torch._C`` has no getter for the executor and the
#: fusion strategy: each setter returns the value it replaces, set back at once).
TORCH_JIT_SWITCHES = {
    "onednn_fusion": ("_jit_llga_enabled", "_jit_set_llga_enabled", False),
    "texpr_fuser": ("_jit_texpr_fuser_enabled", "_jit_set_texpr_fuser_enabled", True),
    "graph_executor_optimize": ("_get_graph_executor_optimize", "_set_graph_executor_optimize",
                                True),
    "can_fuse_on_cpu": ("_jit_can_fuse_on_cpu", "_jit_override_can_fuse_on_cpu", False),
    "profiling_executor": (None, "_jit_set_profiling_executor", True),
    "fusion_strategy": (None, "_jit_set_fusion_strategy", [("STATIC", 2), ("DYNAMIC", 10)]),
}


def _torch_jit_switches(torch: Any) -> dict[str, Any]:
    switches = {}
    for name, (getter, setter, fresh) in TORCH_JIT_SWITCHES.items():
        if not hasattr(torch._C, setter) or (getter and not hasattr(torch._C, getter)):
            continue
        if getter:
            switches[name] = getattr(torch._C, getter)()
        else:
            value = getattr(torch._C, setter)(fresh)
            getattr(torch._C, setter)(value)
            switches[name] = [tuple(pair) for pair in value] if isinstance(value, list) else value
    return switches


def _set_torch_jit_switches(switches: dict[str, Any]) -> None:
    import torch

    for name, value in switches.items():
        getattr(torch._C, TORCH_JIT_SWITCHES[name][1])(value)


def _default_thread_counts() -> frozenset[int]:
    """The intra-op thread counts a fresh torch here may start with: ``MKL_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` when set (MKL's wins, as in torch's ``intraop_default_num_threads``), else
    the CPUs this process may run on, or their physical cores (torch's thread pool counts those
    where it can). A count among them is not the session's choice: it does not travel, and the
    resumed kernel keeps its own machine's default."""
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").isdigit():
            return frozenset({int(os.environ[name])})
    return _cpu_counts()


@functools.cache
def _cpu_counts() -> frozenset[int]:
    """The CPUs this process may run on, and their physical cores (read once: sysfs, a file
    per CPU, at the first checkpoint only)."""
    cpus = os.sched_getaffinity(0)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return frozenset({len(cpus), len(cores)})


def _fresh_quantized_engine(torch: Any) -> str:
    """The quantized engine a fresh torch starts with (aten/src/ATen/Context.cpp ``qEngine``:
    x86 where FBGEMM runs, else oneDNN where built with it, else none)."""
    supported = torch.backends.quantized.supported_engines
    return next((engine for engine in ("x86", "onednn") if engine in supported), "none")


def _torch_defaults(torch: Any, now: dict[str, Any]) -> dict[str, Any]:
    """What a fresh process has, for the settings this torch has (``now``)."""
    printer = type(torch._tensor_str.PRINT_OPTS)
    cudnn = {"enabled": True, "benchmark": False, "deterministic": False, "allow_tf32": True}
    return {
        "default_dtype": torch.float32, "default_device": "cpu", "grad_enabled": True,
        "deterministic": (False, False),
        "cudnn": {key: cudnn[key] for key in now["cudnn"]},
        "float32_matmul_precision": "highest",
        "fp32_precision": {path: TORCH_FP32_PRECISION[path] for path in now.get("fp32_precision", ())},
        "cuda_matmul": {flag: TORCH_MATMUL_FLAGS[flag] for flag in now["cuda_matmul"]},
        "sdp": dict.fromkeys(now["sdp"], True),
        "print_options": {field: getattr(printer, field) for field in TORCH_PRINT_FIELDS},
        "anomaly": (False, True),
        "num_threads": now["num_threads"] if now["num_threads"] in _default_thread_counts() else None,
        "mkldnn": True,
        "opt_einsum": ((True, "auto") if torch.backends.opt_einsum.is_available() else (False, None)),
        "warn_always": False, "flush_denormal": False, "future": (False, False),
        # torch/multiprocessing/__init__.py: file_system on macOS and Windows
        "sharing_strategy": ("file_system" if sys.platform in ("darwin", "win32")
                             else "file_descriptor"),
        "hub_dir": None, "fill_uninitialized_memory": True, "logs": ({}, []),
        "autograd_multithreading": True, "sparse_invariants": False,
        "interop_threads": now["interop_threads"] if now["interop_threads"] in _cpu_counts() else None,
        "mkldnn_deterministic": False, "nnpack": True, "backcompat_warnings": (False, False),
        "jit": {name: TORCH_JIT_SWITCHES[name][2] for name in now["jit"]},
        "mha_fastpath": True, "compiler_stance": ("default", False, None), "validate_args": __debug__,
        "quantized_engine": _fresh_quantized_engine(torch), "math_sdp_reduction": False,
        "grad_stream_warning": True,
        "autocast": ({device: (False, getattr(torch, dtype)) for device, dtype in AUTOCAST.items()},
                     True),
    }


def _torch_settings() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    now = _torch_settings_now(torch)
    defaults = _torch_defaults(torch, now)
    changed = {key: value for key, value in now.items() if value != defaults[key]}
    return changed or None


def _set_default_device(device: str) -> None:
    """``torch.set_default_device``, only where that device exists (a session on a GPU resumed
    without one: every new tensor would fail, so the default stays the CPU and this says why)."""
    import torch

    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise RuntimeError(f"{device} is not available here: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    torch.set_default_device(device)


def _set_autocast(state: tuple[dict[str, tuple[bool, Any]], bool]) -> None:
    """The global autocast switches (``torch.set_autocast_enabled("cpu", True)``, its dtype, the
    cast cache) per device type, as the session left them outside any ``autocast`` block."""
    import torch

    devices, cache = state
    for device, (enabled, dtype) in devices.items():
        torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_cache_enabled(cache)


def _set_torch_logs(state: tuple[dict[str, int], list[str]]) -> None:
    """What ``torch._logging.set_logs`` leaves: the levels by logger and the artifacts on, then
    the loggers set up from them (``_init_logs``; TORCH_LOGS set here wins, as it does there)."""
    from torch._logging import _internal

    if "TORCH_LOGS" in os.environ:
        raise ValueError("TORCH_LOGS is set here, and wins over the session's set_logs")
    levels, artifacts = state
    _internal.log_state.clear()
    _internal.log_state.log_qname_to_level.update(levels)
    _internal.log_state.artifact_names.update(artifacts)
    _internal._init_logs()


def _restore_torch_settings(changed: dict[str, Any]) -> str | None:
    import torch

    cuda = torch.backends.cuda
    setters = {
        "default_dtype": torch.set_default_dtype,
        "default_device": _set_default_device,
        "grad_enabled": torch.set_grad_enabled,
        "deterministic": lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        "cudnn": lambda v: [setattr(torch.backends.cudnn, k, flag) for k, flag in v.items()],
        "float32_matmul_precision": torch.set_float32_matmul_precision,
        "fp32_precision": lambda v: [setattr(_backend(torch, path), "fp32_precision", value)
                                     for path, value in v.items()],
        "cuda_matmul": lambda v: [setattr(cuda.matmul, k, flag) for k, flag in v.items()],
        "sdp": lambda v: [getattr(cuda, f"enable_{k}_sdp")(flag) for k, flag in v.items()],
        "print_options": lambda v: torch.set_printoptions(**v),
        "anomaly": lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1]),
        "num_threads": torch.set_num_threads,
        "mkldnn": lambda v: setattr(torch.backends.mkldnn, "enabled", v),
        "opt_einsum": lambda v: [setattr(torch.backends.opt_einsum, "enabled", v[0]),
                                 setattr(torch.backends.opt_einsum, "strategy", v[1])],
        "warn_always": torch.set_warn_always,
        "sharing_strategy": torch.multiprocessing.set_sharing_strategy,
        "hub_dir": torch.hub.set_dir,
        "fill_uninitialized_memory": torch._C._set_deterministic_fill_uninitialized_memory,
        "logs": _set_torch_logs,
        "autograd_multithreading": torch._C._set_multithreading_enabled,
        "sparse_invariants": torch._C._set_check_sparse_tensor_invariants,
        "interop_threads": torch.set_num_interop_threads,
        "quantized_engine": lambda v: setattr(torch.backends.quantized, "engine", v),
        "math_sdp_reduction": torch._C._set_math_sdp_allow_fp16_bf16_reduction,
        "grad_stream_warning": torch._C._set_warn_on_accumulate_grad_stream_mismatch,
        "mkldnn_deterministic": lambda v: setattr(torch.backends.mkldnn, "deterministic", v),
        "nnpack": torch._C._set_nnpack_enabled,
        "backcompat_warnings": lambda v: [
            setattr(torch.utils.backcompat.broadcast_warning, "enabled", v[0]),
            setattr(torch.utils.backcompat.keepdim_warning, "enabled", v[1])],
        "jit": _set_torch_jit_switches,
        "mha_fastpath": lambda v: torch.backends.mha.set_fastpath_enabled(v),
        "compiler_stance": lambda v: torch.compiler.set_stance(
            v[0], skip_guard_eval_unsafe=v[1], force_backend=v[2]),
        "validate_args": torch.distributions.Distribution.set_default_validate_args,
        "autocast": _set_autocast,
        "flush_denormal": torch.set_flush_denormal,
        "future": lambda v: [torch.__future__.set_overwrite_module_params_on_conversion(v[0]),
                             torch.__future__.set_swap_module_params_on_conversion(v[1])],
    }
    refused = []
    for key, value in changed.items():
        try:
            setters[key](value)
        except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as exc:
            refused.append(f"{key} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- torch's config modules (torch._dynamo.config, torch._inductor.config, ...) ---------------

def _torch_configs() -> Any:
    """What the session set on torch's config modules (``torch/utils/_config_module.py``: each
    option keeps a ``user_override`` apart from its default and the environment's value), by
    module: ``torch._dynamo.config.cache_size_limit = 64``, ``torch._inductor.config.
    coordinate_descent_tuning = True``. Aliases are left to the option they name; values read
    from the environment stay the new pod's."""
    config_module = sys.modules.get("torch.utils._config_module")
    unset = getattr(config_module, "_UNSET_SENTINEL", None)
    if unset is None:
        return None
    changed: dict[str, dict[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, config_module.ConfigModule):
            continue
        for key, entry in module._config.items():
            value = entry.user_override.get()
            if entry.alias is None and value is not unset and value != entry.default:
                changed.setdefault(name, {})[key] = value
    return changed or None


def _restore_torch_configs(changed: dict[str, dict[str, Any]]) -> str | None:
    import importlib

    refused = []
    for name, options in changed.items():
        for key, value in options.items():
            try:
                setattr(importlib.import_module(name), key, value)
            except Exception as exc:  # a module or option this torch does not have
                refused.append(f"{name}.{key} ({type(exc).__name__}: {exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- operators of torch.library's functional API ---------------------------------------------

def _torch_library_operators() -> Any:
    """The operators the cells defined or implemented with torch.library's functional API
    (``torch.library.define("ns::op", ...)``, ``@torch.library.impl("ns::op", ...)``): torch
    keeps their ``Library`` in ``_keep_alive`` and the functions in its dispatcher, where they
    cannot be read back. An operator counts as the cells' when its qualified name is in their
    text (torch's own and other libraries' are not). Not carried: the resume names them."""
    library, shell = sys.modules.get("torch.library"), the_shell()
    if library is None or shell is None:
        return None
    names = {name for kept in getattr(library, "_keep_alive", ())
             for name in [*getattr(kept, "_op_defs", ()),
                          *("::".join(key.split("/")[:2]) for key in getattr(kept, "_op_impls", ()))]}
    cells = "\n".join(shell.history_manager.input_hist_raw)
    mine = sorted(name for name in names if name in cells)
    return mine or None


def _name_torch_library_operators(operators: list[str]) -> str:
    return (f"{', '.join(operators)} (made with torch.library.define/impl, which keep the "
            "functions in the old kernel's dispatcher): run their cells again, or define them "
            "with torch.library.custom_op, which comes back")


# -- torch modes left entered ------------------------------------------------------------------

def _torch_modes() -> Any:
    """The torch modes a cell entered and left open (``mode.__enter__()`` in one cell, the exit
    in a later one): the thread's ``TorchFunctionMode`` and ``TorchDispatchMode`` stacks
    (``FlopCounterMode`` pushes one; the ``DeviceContext`` of ``set_default_device`` aside,
    which "torch settings" carries) and the saved-tensors hooks
    (``torch.autograd.graph.saved_tensors_hooks``), and forward-mode AD's ``dual_level``.
    None of it is in the namespace: after a
    resume they were off, under an exact verdict (a flop counter counted nothing, a pack hook
    no longer ran; found by a probe). Not entered again (a mode's ``__enter__`` may reset what
    it counted): the resume names them."""
    if "torch" not in sys.modules:
        return None
    device = getattr(sys.modules.get("torch.utils._device"), "DeviceContext", ())
    stacks = [(sys.modules.get("torch.overrides"), "_get_current_function_mode_stack"),
              (sys.modules.get("torch.utils._python_dispatch"), "_get_current_dispatch_mode_stack")]
    names = [type(mode).__name__ for module, reader in stacks if module is not None
             for mode in getattr(module, reader)() if not isinstance(mode, device)]
    top = getattr(sys.modules["torch"]._C._autograd, "_top_saved_tensors_default_hooks", None)
    with contextlib.suppress(Exception):  # another torch's signature
        if top is not None and top(False) is not None:
            names.append("saved_tensors_hooks")
    forward = sys.modules.get("torch.autograd.forward_ad")
    if getattr(forward, "_current_level", -1) >= 0:  # its dual tensors come back without tangents
        names.append("forward_ad.dual_level")
    return names or None


def _name_torch_modes(names: list[str]) -> str:
    return (f"not entered again: {', '.join(names)} (entered in a cell and still open at the "
            "pause: enter it again after the resume)")


# -- torch's global hooks ----------------------------------------------------------------------

def _torch_global_hooks() -> Any:
    """The hooks the session registered for every module or optimizer
    (``register_module_forward_hook``, ``register_optimizer_step_pre_hook``, ...), by the dict
    they are in (``torch_reduce.GLOBAL_HOOKS``; a fresh torch has them empty), with the
    full-backward switch beside them."""
    from .torch_reduce import loaded_global_hooks  # torch_reduce imports nothing: cheap

    hooks = {(module, name): dict(dicts) for module, name, dicts in loaded_global_hooks() if dicts}
    if not hooks:
        return None
    full = getattr(sys.modules.get("torch.nn.modules.module"), "_global_is_full_backward_hook", None)
    return {"hooks": hooks, "full_backward": full}


def _restore_torch_global_hooks(state: dict[str, Any]) -> str | None:
    import importlib

    for (module, name), hooks in state["hooks"].items():
        getattr(importlib.import_module(module), name).update(hooks)
    if state["full_backward"] is not None:
        importlib.import_module("torch.nn.modules.module")._global_is_full_backward_hook = \
            state["full_backward"]
    return None


# -- torch.distributed's default process group -----------------------------------------------

def _torch_process_group() -> Any:
    """The default process group the session made (``init_process_group``): its backend, this
    process's rank and the world size; None when torch.distributed is not loaded or no group
    is up (a fresh kernel has none)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return {"backend": str(dist.get_backend()), "rank": dist.get_rank(),
            "world_size": dist.get_world_size()}


def _restore_torch_process_group(group: dict[str, Any]) -> str | None:
    """A group of one process made again (``rebuild.process_group_of_one``); a larger one is
    named: its other processes did not resume with this kernel."""
    if group["world_size"] != 1:
        return (f"rank {group['rank']} of a {group['backend']} process group of "
                f"{group['world_size']} processes: its other processes did not resume with this "
                "kernel (call init_process_group again)")
    from .rebuild import process_group_of_one

    process_group_of_one(group["backend"])  # unless a distributed model made it already
    return None


# -- Hugging Face switches -------------------------------------------------------------------

HUB_BARS = "huggingface_hub.utils.tqdm"
TRANSFORMERS_LOGGING = "transformers.utils.logging"
DATASETS_BARS = "datasets.utils.tqdm"
DATASETS_CACHING = "datasets.fingerprint"


def _hf_switches() -> Any:
    """The switches of the Hugging Face libraries their functions flip, where the session
    flipped them: huggingface_hub's ``progress_bar_states`` (huggingface_hub/utils/tqdm.py,
    empty in a fresh process: ``disable_progress_bars()`` and ``enable_progress_bars(name)``
    fill it), transformers' ``_tqdm_active`` (transformers/utils/logging.py,
    ``disable_progress_bar()``; a fresh process takes it from ``HF_HUB_DISABLE_PROGRESS_BARS``),
    and datasets' progress bars (datasets/utils/tqdm.py, ``disable_progress_bars()``; fresh:
    from ``HF_DATASETS_DISABLE_PROGRESS_BARS``) and caching (datasets/fingerprint.py,
    ``disable_caching()``; fresh: on)."""
    state = {}
    hub = sys.modules.get(HUB_BARS)
    if hub is not None and getattr(hub, "progress_bar_states", None):
        state["hub"] = dict(hub.progress_bar_states)
    transformers = sys.modules.get(TRANSFORMERS_LOGGING)
    if hub is not None and transformers is not None and hasattr(transformers, "_tqdm_active"):
        fresh = hub.HF_HUB_DISABLE_PROGRESS_BARS is not True
        if bool(transformers._tqdm_active) != fresh:
            state["transformers"] = bool(transformers._tqdm_active)
    bars = sys.modules.get(DATASETS_BARS)
    disabled = getattr(bars, "_hf_datasets_progress_bars_disabled", None)
    if disabled is not None and disabled != (bars.HF_DATASETS_DISABLE_PROGRESS_BARS or False):
        state["datasets_bars_disabled"] = disabled
    caching = getattr(sys.modules.get(DATASETS_CACHING), "_CACHING_ENABLED", True)
    if caching is not True:
        state["datasets_caching"] = caching
    return state or None


def _restore_hf_switches(state: dict[str, Any]) -> str | None:
    import importlib

    if "hub" in state:
        states = importlib.import_module(HUB_BARS).progress_bar_states
        states.clear()
        states.update(state["hub"])
    if "transformers" in state:
        importlib.import_module(TRANSFORMERS_LOGGING)._tqdm_active = state["transformers"]
    if "datasets_bars_disabled" in state:
        bars = importlib.import_module(DATASETS_BARS)
        bars._hf_datasets_progress_bars_disabled = state["datasets_bars_disabled"]
    if "datasets_caching" in state:
        importlib.import_module(DATASETS_CACHING)._CACHING_ENABLED = state["datasets_caching"]
    return None


# -- messages a library shows once -----------------------------------------------------------

#: Functions that show a message once per process and remember it in a ``functools.lru_cache``
#: keyed by their arguments (the logger first): transformers/utils/logging.py ``warning_once``
#: and ``info_once``, set on ``logging.Logger``. Python's warning registry is carried apart
#: (``warnings_shown``).
ONCE_FUNCTIONS = ((TRANSFORMERS_LOGGING, "warning_once"), (TRANSFORMERS_LOGGING, "info_once"),
                  ("torch._logging._internal", "warning_once"))
_PLAIN = (str, int, float, bool, type(None))


def _carried_argument(value: Any) -> bool:
    """A plain value, or a library's class or function (dynamo's "Profiler record function
    <class ...> will be ignored"), which comes back as the same object: the call's cache key
    is the same again."""
    if type(value) in _PLAIN:
        return True
    from .library_objects import findable

    return (isinstance(value, (type, types.FunctionType))
            and getattr(value, "__module__", "__main__") != "__main__" and findable(value))


def _shown_once() -> Any:
    """Per function of ``ONCE_FUNCTIONS``, the (logger name, arguments) it was called with. The
    C cache has no API to list its keys: its dict is among what the wrapper holds
    (``gc.get_referents``). Calls with keyword arguments or other arguments than plain values
    and library classes and functions are not carried (the message may show once more)."""
    shown: dict[str, list[tuple[str, tuple]]] = {}
    for module, name in ONCE_FUNCTIONS:
        cached = getattr(sys.modules.get(module), name, None)
        if cached is None or not hasattr(cached, "cache_info"):
            continue
        for held in gc.get_referents(cached):
            if type(held) is not dict:
                continue
            for key in held:
                if (type(key) is tuple and key and isinstance(key[0], logging.Logger)
                        and all(_carried_argument(value) for value in key[1:])):
                    shown.setdefault(f"{module}:{name}", []).append((key[0].name, key[1:]))
    return shown or None


def _restore_shown_once(shown: dict[str, list[tuple[str, tuple]]]) -> str | None:
    """Each call made again with its logger disabled: remembered, shown nowhere."""
    import importlib

    for qualified, calls in shown.items():
        module, _, name = qualified.partition(":")
        cached = getattr(importlib.import_module(module), name)
        for logger_name, arguments in calls:
            logger = logging.getLogger(logger_name)
            disabled, logger.disabled = logger.disabled, True
            try:
                cached(logger, *arguments)
            finally:
                logger.disabled = disabled
    return None


# -- the interpreter's own settings ----------------------------------------------------------

def _python_settings_now() -> dict[str, Any]:
    """The recursion limit, the int-to-str digit limit (3.11+), the cyclic collector's switch and
    thresholds, the process's umask (the permissions of every file it creates), its resource
    limits (``RLIMIT_NOFILE`` raised for DataLoader workers: "too many open files"), its
    locale (``setlocale`` without a value reads it), the thread switch interval, whether
    ``faulthandler`` dumps tracebacks on a crash (``faulthandler.enable()``, which then writes
    to the kernel's stderr: its file and ``all_threads`` cannot be read back), the sockets'
    default timeout (``socket.setdefaulttimeout``: every HTTP client without its own) and
    whether ``tracemalloc`` traces, with how many frames (0: it does not; the traces it took
    are this process's: the resumed kernel traces from its resume on), the collector's debug
    flags (``gc.set_debug(gc.DEBUG_SAVEALL)``) and the signals the kernel's thread blocks
    (``signal.pthread_sigmask``)."""
    now: dict[str, Any] = {"recursion_limit": sys.getrecursionlimit(),
                           "gc": (collector.session_enabled(), gc.get_threshold()), "umask": _umask(),
                           "rlimits": _rlimits(), "locale": locale.setlocale(locale.LC_ALL),
                           "switch_interval": sys.getswitchinterval(),
                           "faulthandler": faulthandler.is_enabled(),
                           "socket_timeout": socket.getdefaulttimeout(),
                           "tracemalloc": _tracemalloc.is_tracing()
                           and _tracemalloc.get_traceback_limit(),
                           "gc_debug": gc.get_debug(),
                           "blocked_signals": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))}
    if hasattr(sys, "get_int_max_str_digits"):
        now["int_max_str_digits"] = sys.get_int_max_str_digits()
    return now


#: The resource limits a session may change (``resource.RLIMIT_*``), by name.
_RLIMITS = ("RLIMIT_NOFILE", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_AS", "RLIMIT_DATA",
            "RLIMIT_NPROC", "RLIMIT_MEMLOCK")


def _rlimits() -> dict[str, tuple[int, int]]:
    import resource

    return {name: resource.getrlimit(getattr(resource, name)) for name in _RLIMITS
            if hasattr(resource, name)}


def _umask() -> int:
    """The umask, read the only way POSIX offers: set and put back at once."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


#: As the kernel started (this module is imported when the extension loads).
_PYTHON_AT_START = _python_settings_now()


def _python_settings() -> Any:
    """What the session changed of ``_python_settings_now``, the thread's ``decimal`` context
    when it is not a fresh one (only if ``decimal`` is loaded), and multiprocessing's start
    method when set to another than the platform's default (``set_start_method("spawn")``, which
    CUDA needs in DataLoader workers; a library asking for the method fixes the default one,
    which a fresh process picks by itself)."""
    changed = {k: v for k, v in _python_settings_now().items() if v != _PYTHON_AT_START.get(k)}
    decimal = sys.modules.get("decimal")
    if decimal is not None and repr(decimal.getcontext()) != repr(decimal.Context()):
        changed["decimal_context"] = decimal.getcontext().copy()
    multiprocessing = sys.modules.get("multiprocessing")
    method = multiprocessing and multiprocessing.get_start_method(allow_none=True)
    if method and method != multiprocessing.get_all_start_methods()[0]:  # the first: the default
        changed["start_method"] = method
    return changed or None


def _restore_python_settings(changed: dict[str, Any]) -> str | None:
    def collector_switch(value: tuple[bool, tuple[int, ...]]) -> None:
        collector.set_session_enabled(value[0])  # a resume holds the collector: at its end
        gc.set_threshold(*value[1])

    def decimal_context(context: Any) -> None:
        import decimal

        decimal.setcontext(context)

    def start_method(method: str) -> None:
        import multiprocessing

        multiprocessing.set_start_method(method, force=True)

    def rlimits(limits: dict[str, tuple[int, int]]) -> None:
        import resource

        now = _rlimits()
        for name, limit in limits.items():
            if now.get(name) != tuple(limit):
                resource.setrlimit(getattr(resource, name), tuple(limit))

    def locale_setting(setting: str) -> None:
        try:
            locale.setlocale(locale.LC_ALL, setting)
        except locale.Error as exc:  # not installed on this pod
            raise ValueError(exc) from None

    def crash_tracebacks(enabled: bool) -> None:
        if not enabled:
            faulthandler.disable()
        elif not faulthandler.is_enabled():
            faulthandler.enable(sys.__stderr__)  # the kernel's own stderr, as in the session

    def memory_tracing(frames: int) -> None:
        import tracemalloc

        tracemalloc.stop()
        if frames:
            tracemalloc.start(frames)

    setters = {"recursion_limit": sys.setrecursionlimit, "gc": collector_switch, "umask": os.umask,
               "rlimits": rlimits, "locale": locale_setting,
               "switch_interval": sys.setswitchinterval, "faulthandler": crash_tracebacks,
               "socket_timeout": socket.setdefaulttimeout, "tracemalloc": memory_tracing,
               "int_max_str_digits": getattr(sys, "set_int_max_str_digits", None),
               "decimal_context": decimal_context, "start_method": start_method,
               "gc_debug": gc.set_debug,
               "blocked_signals": lambda v: signal.pthread_sigmask(signal.SIG_SETMASK, v)}
    refused = []
    for key, value in changed.items():
        try:
            setters[key](value)
        except (KeyError, RecursionError, TypeError, ValueError, OSError) as exc:
            refused.append(f"{key} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- signal handlers -------------------------------------------------------------------------

#: Signals whose handler is not the session's to carry: SIGINT is ipykernel's (it sets its own
#: around each cell, for interrupts); SIGKILL and SIGSTOP take none.
_NOT_CARRIED = {signal.SIGINT, signal.SIGKILL, signal.SIGSTOP}


def _handlers_now() -> dict[int, Any]:
    """Each signal's handler as Python sees it (``None``: one set outside Python)."""
    handlers = {}
    for number in signal.valid_signals() - _NOT_CARRIED:
        with contextlib.suppress(ValueError, OSError):
            handlers[int(number)] = signal.getsignal(number)
    return handlers


#: As the kernel started.
_HANDLERS_AT_START = _handlers_now()


def _signal_handlers() -> Any:
    """The handlers the session set with ``signal.signal``, by signal name: a function of the
    notebook or of the session's own modules (one that saves a checkpoint on SIGTERM), a signal
    ignored or set back to its default. A library's handler is the library's: it sets it again
    when it needs it (torch's SIGCHLD handler, at a DataLoader's next workers). One set outside
    Python cannot be read: left as the resumed kernel has it."""
    changed = {_signal_name(number): handler
               for number, handler in _handlers_now().items()
               if handler is not None and handler != _HANDLERS_AT_START.get(number)
               and the_sessions(handler)}
    return changed or None


def _signal_name(number: int) -> str:
    """``SIGTERM``; a real-time signal, which has no name in ``signal.Signals``, by number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def the_sessions(handler: Any) -> bool:
    """``SIG_IGN``, ``SIG_DFL``, or a callable (a class) defined in the notebook or its own
    modules (through a bound method or a ``functools.partial``)."""
    if isinstance(handler, signal.Handlers):
        return True
    code = getattr(handler, "func", handler)  # a partial
    module = getattr(getattr(code, "__func__", code), "__module__", None)
    return module == "__main__" or (isinstance(module, str)
                                  and local_modules.is_local_module(module))


def _copyreg_reducers() -> Any:
    """The reducers the session registered with ``copyreg.pickle`` (for its own class, or a
    function of its own for a library's): ``pickle``, ``copy`` and every process that unpickles
    (DataLoader workers, multiprocessing) use them. A fresh process has the libraries' only."""
    import copyreg

    mine = {kind: reducer for kind, reducer in list(copyreg.dispatch_table.items())
            if the_sessions(kind) or the_sessions(reducer)}
    return mine or None


def _restore_copyreg_reducers(reducers: dict[type, Any]) -> str | None:
    import copyreg

    refused = []
    for kind, reducer in reducers.items():
        try:
            copyreg.pickle(kind, reducer)
        except TypeError as exc:
            refused.append(f"{getattr(kind, '__qualname__', kind)} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


_paused_hooks: dict[str, Any] | None = None  # inside ``trace_functions_paused``: the session's


@contextlib.contextmanager
def trace_functions_paused() -> Iterator[None]:
    """The thread's trace and profile functions off while a checkpoint runs (a profiler the
    notebook set recorded every call the checkpoint made), set again after; ``_trace_functions``
    reads them from here meanwhile."""
    global _paused_hooks
    _paused_hooks = {"trace": sys.gettrace(), "profile": sys.getprofile()}
    sys.settrace(None)
    sys.setprofile(None)
    try:
        yield
    finally:
        sys.setprofile(_paused_hooks["profile"])
        sys.settrace(_paused_hooks["trace"])
        _paused_hooks = None


def _trace_functions() -> Any:
    """The notebook's trace and profile functions (``sys.settrace``, ``sys.setprofile``) on the
    kernel's thread: a debugger's or profiler's of the kernel itself is not the session's."""
    hooks = _paused_hooks or {"trace": sys.gettrace(), "profile": sys.getprofile()}
    mine = {kind: hook for kind, hook in hooks.items() if hook is not None and the_sessions(hook)}
    return mine or None


def _restore_trace_functions(hooks: dict[str, Any]) -> None:
    if "profile" in hooks:
        sys.setprofile(hooks["profile"])
    if "trace" in hooks:
        sys.settrace(hooks["trace"])


def _exit_handlers() -> Any:
    """The exit handlers the session registered (``atexit.register`` of a function of the
    notebook or of its own modules, with its arguments), oldest first: a library registers its
    own again when it is imported."""
    mine = [entry for entry in registrations.registered("atexit") if the_sessions(entry[0])]
    return mine or None


def _restore_exit_handlers(handlers: list[tuple[Any, tuple, dict[str, Any]]]) -> str | None:
    import atexit

    for func, args, kwargs in handlers:
        atexit.register(func, *args, **kwargs)
    return None


def _restore_signal_handlers(handlers: dict[str, Any]) -> str | None:
    refused = []
    for name, handler in handlers.items():
        try:
            signal.signal(getattr(signal, name) if name.isidentifier() else int(name), handler)
        except (AttributeError, TypeError, ValueError, OSError) as exc:
            refused.append(f"{name} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- warnings, logging -----------------------------------------------------------------------

def _warning_filters() -> Any:
    remember_baseline()
    return list(warnings.filters) if warnings.filters != _baseline["warnings"] else None


def _restore_warning_filters(filters: list[tuple]) -> str | None:
    warnings.filters[:] = filters
    warnings._filters_mutated()
    return None


#: The functions ``warnings`` shows a warning through, which the session may replace:
#: ``catch_warnings(record=True)`` entered by hand sets ``_showwarnmsg_impl`` to its list's
#: ``append`` (the warnings go to that list until ``__exit__``), a cell may assign the others.
WARNINGS_DISPLAY = ("showwarning", "_showwarnmsg_impl", "formatwarning", "_formatwarnmsg_impl")


def _warnings_display_now() -> dict[str, Any]:
    return {name: getattr(warnings, name) for name in WARNINGS_DISPLAY if hasattr(warnings, name)}


def _warnings_display() -> Any:
    """The display functions that are not the kernel's at load, nor ``logging``'s
    (``captureWarnings`` is the logging switches' entry)."""
    remember_baseline()
    before = _baseline["warnings_display"]
    changed = {name: function for name, function in _warnings_display_now().items()
               if function is not before.get(name)
               and getattr(function, "__module__", None) != "logging"}
    return changed or None


def _restore_warnings_display(changed: dict[str, Any]) -> str | None:
    for name, function in changed.items():
        setattr(warnings, name, function)
    return None


def _loggers() -> dict[str, logging.Logger]:
    loggers = {"": logging.getLogger()}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            loggers[name] = logger
    return loggers


def _logger_facts(logger: logging.Logger) -> tuple:
    """level, propagate, disabled, the handlers (ids) that matter (not NullHandlers), and the
    filters (ids)."""
    return (logger.level, logger.propagate, logger.disabled,
            [id(h) for h in logger.handlers if not isinstance(h, logging.NullHandler)],
            [id(f) for f in logger.filters])


_FRESH_LOGGER = (logging.NOTSET, True, False, [], [])


def _logging_config() -> Any:
    """Per logger changed in the session (or since a library made it): level, propagate,
    disabled, the handlers it gained (stream and file handlers as recipes, with their filters;
    the others by type name only), those of them the namespace holds as objects (``held``, by
    place: they travel with the variables anyway, and the variable and the logger's handler
    must stay one object), where each of its handlers writes, and the filters it gained
    (``logger.addFilter``: a function or a ``logging.Filter``)."""
    remember_baseline()
    before, held = _baseline["logging"], _held_by_the_namespace()
    changed = {}
    for name, logger in _loggers().items():
        facts, old = _logger_facts(logger), before.get(name, _FRESH_LOGGER)
        if facts == old:
            continue
        recipes = [(_handler_recipe(h), h) for h in logger.handlers]
        gained = [(recipe, h) for recipe, h in recipes if id(h) in facts[3] and id(h) not in old[3]]
        changed[name] = {
            "level": logger.level, "propagate": logger.propagate, "disabled": logger.disabled,
            "handlers": [recipe for recipe, _ in gained],
            "held": {place: h for place, (_, h) in enumerate(gained) if id(h) in held},
            "writes_to": [_writes_to(recipe) for recipe, _ in recipes],
            "filters": [f for f in logger.filters if id(f) not in old[4]],
        }
    return changed or None


def _held_by_the_namespace() -> set[int]:
    """The ids of the values the notebook's namespace holds (``h = logging.StreamHandler()``)."""
    shell = the_shell()
    return {id(value) for value in list(shell.user_ns.values())} if shell is not None else set()


def _usable(handler: Any) -> bool:
    """Whether a handler that came back with the variables can write: a stream handler's stream
    came back (a file outside the home volume comes back a placeholder; a ``FileHandler`` with
    no stream opens its file at the next record)."""
    stream = getattr(handler, "stream", None)
    return isinstance(handler, logging.Handler) and (
        stream is None or callable(getattr(stream, "write", None)))


def _handler_recipe(handler: logging.Handler) -> dict[str, Any]:
    recipe: dict[str, Any] = {"type": type(handler).__name__, "level": handler.level}
    formatter = handler.formatter
    if formatter is not None:
        style = next((s for s, (cls, _f) in logging._STYLES.items()
                      if type(formatter._style) is cls), "%")
        recipe["format"] = (formatter._style._fmt, formatter.datefmt, style)
    if handler.filters:
        recipe["filters"] = list(handler.filters)
    if type(handler) is logging.FileHandler:
        recipe["file"] = (handler.baseFilename, handler.encoding)
    elif type(handler) is logging.StreamHandler:
        stream = handler.stream
        recipe["stream"] = ("stdout" if stream in (sys.stdout, sys.__stdout__) else
                            "stderr" if stream in (sys.stderr, sys.__stderr__) else None)
    return recipe


def _rebuild_handler(recipe: dict[str, Any]) -> logging.Handler | None:
    if "file" in recipe:
        path, encoding = recipe["file"]
        handler: logging.Handler = logging.FileHandler(path, mode="a", encoding=encoding)
    elif recipe.get("stream"):
        handler = logging.StreamHandler(getattr(sys, recipe["stream"]))
    else:
        return None
    _apply_recipe(handler, recipe)
    return handler


def _apply_recipe(handler: logging.Handler, recipe: dict[str, Any]) -> None:
    handler.setLevel(recipe["level"])
    for kept in recipe.get("filters", ()):
        handler.addFilter(kept)  # a filter already there is not added twice
    if "format" in recipe:
        fmt, datefmt, style = recipe["format"]
        handler.setFormatter(logging.Formatter(fmt, datefmt, style))


def _writes_to(recipe: dict[str, Any]) -> tuple[str, Any]:
    """A handler's kind and where it writes (a stream's name, a file's path; None: unknown)."""
    return recipe["type"], recipe.get("stream") or recipe.get("file")


def _remove_handlers_made_again(logger: logging.Logger, writes_to: list | None) -> None:
    """Remove the stream and file handlers of ``logger`` that write where none of the
    session's did (``writes_to``, None in older snapshots): a library's import made them again
    after the session had removed them (``transformers.utils.logging.disable_default_handler``).
    A handler the recipe cannot tell (another type, a stream of its own) stays."""
    if writes_to is None:
        return
    kept = {tuple(target) for target in writes_to}
    for handler in list(logger.handlers):
        target = _writes_to(_handler_recipe(handler))
        if (type(handler) in (logging.StreamHandler, logging.FileHandler)
                and target[1] is not None and target not in kept):
            logger.removeHandler(handler)


def _restore_logging_config(changed: dict[str, dict[str, Any]]) -> str | None:
    """Levels and flags set; handlers made again that the session had removed, removed
    (``_remove_handlers_made_again``); each handler the namespace held added as it came back
    with the variables (when it can write: ``_usable``), the others rebuilt; unless the logger
    has one that writes to the same place already (a library that adds its handler at import
    did so again here): that one takes the recipe's level and format, which the session may
    have changed (transformers' ``enable_explicit_format``), rather than a second handler
    printing every message again. Each handler here stands for one of the session's: a second
    one the session added to the same stream (``transformers.logging.add_handler``) is
    rebuilt beside it."""
    lost = []
    for name, config in changed.items():
        held = config.get("held", {})  # absent in older snapshots
        logger = logging.getLogger(name or None)
        logger.setLevel(config["level"])
        logger.propagate, logger.disabled = config["propagate"], config["disabled"]
        _remove_handlers_made_again(logger, config.get("writes_to"))
        for kept in config.get("filters", ()):
            logger.addFilter(kept)  # a filter already there is not added twice
        unmatched = [(_handler_recipe(h), h) for h in logger.handlers]
        for place, recipe in enumerate(config["handlers"]):
            made_again = (next((pair for pair in unmatched if pair[0] == recipe), None) or next(
                (pair for pair in unmatched if _writes_to(pair[0]) == _writes_to(recipe)
                 and _writes_to(recipe)[1] is not None), None))
            if made_again is not None:  # each handler here stands for one of the session's
                unmatched = [pair for pair in unmatched if pair is not made_again]
                _apply_recipe(made_again[1], recipe)
                continue
            if _usable(held.get(place)):  # the variable's handler: one object, as before
                logging._addHandlerRef(held[place])  # closed at exit, as Handler() registers it
                logger.addHandler(held[place])
                continue
            try:
                handler = _rebuild_handler(recipe)
            except OSError as exc:
                handler, recipe = None, {**recipe, "type": f"{recipe['type']} ({exc.strerror})"}
            if handler is None:
                lost.append(f"{recipe['type']} of logger {name or 'root'}")
            else:
                logger.addHandler(handler)
    return f"handlers not rebuilt: {', '.join(lost)}" if lost else None


def _logging_switches() -> Any:
    """``logging.disable(level)`` (what notebooks call to quiet every library) and
    ``logging.captureWarnings(True)`` (warnings sent to the ``py.warnings`` logger), where set: a
    fresh process has neither."""
    switches = {}
    if logging.root.manager.disable:
        switches["disable"] = logging.root.manager.disable
    if logging._warnings_showwarning is not None:  # set by captureWarnings(True) only
        switches["capture_warnings"] = True
    return switches or None


def _restore_logging_switches(switches: dict[str, Any]) -> str | None:
    if "disable" in switches:
        logging.disable(switches["disable"])
    if switches.get("capture_warnings"):
        logging.captureWarnings(True)
    return None


ENTRIES = (
    ("matplotlib backend", _matplotlib_backend, _restore_matplotlib_backend),
    ("matplotlib figure formats", _figure_formats, _restore_figure_formats),
    ("matplotlib colormaps", _matplotlib_colormaps, _restore_matplotlib_colormaps),
    ("matplotlib fonts", _matplotlib_fonts, _restore_matplotlib_fonts),
    ("matplotlib unit converters", _matplotlib_units, _restore_matplotlib_units),
    ("matplotlib rcParams", _matplotlib_rc, _restore_matplotlib_rc),
    ("matplotlib figures", _matplotlib_figures, _restore_matplotlib_figures),
    ("numpy print options and seterr", _numpy_options, _restore_numpy_options),
    ("scipy.special errors", _scipy_special_errors, _restore_scipy_special_errors),
    ("pandas options", _pandas_options, _restore_pandas_options),
    ("scikit-learn config", _sklearn_config, _restore_sklearn_config),
    ("joblib parallel config", _joblib_config, _restore_joblib_config),
    ("BLAS and OpenMP threads", _thread_pools, _restore_thread_pools),
    ("nest_asyncio", _nest_asyncio, _restore_nest_asyncio),
    ("torch settings", _torch_settings, _restore_torch_settings),
    ("torch config modules", _torch_configs, _restore_torch_configs),
    ("torch global hooks", _torch_global_hooks, _restore_torch_global_hooks),
    ("torch modes left entered", _torch_modes, _name_torch_modes),
    ("torch.distributed process group", _torch_process_group, _restore_torch_process_group),
    ("torch.library operators", _torch_library_operators, _name_torch_library_operators),
    ("Hugging Face switches", _hf_switches, _restore_hf_switches),
    ("messages shown once", _shown_once, _restore_shown_once),
    ("python settings", _python_settings, _restore_python_settings),
    ("signal handlers", _signal_handlers, _restore_signal_handlers),
    ("copyreg reducers", _copyreg_reducers, _restore_copyreg_reducers),
    ("exit handlers", _exit_handlers, _restore_exit_handlers),
    ("trace and profile functions", _trace_functions, _restore_trace_functions),
    ("warnings filters", _warning_filters, _restore_warning_filters),
    ("warnings display", _warnings_display, _restore_warnings_display),
    ("logging configuration", _logging_config, _restore_logging_config),
    ("logging switches", _logging_switches, _restore_logging_switches),
)
