"""Built-in ``interpreter_state`` entries for IPython: the source of notebook code, the
extensions loaded in the session (``autoreload`` with its mode and ``%aimport`` lists), the
shell aliases it defined or removed (``%alias``, ``%unalias``), ``%config`` and the other
setting magics (``%precision``, ``%xmode``, ``%pdb``, ...) and the settings assigned to the
shell's objects, the magics, event callbacks and code transformers the notebook registered,
the display printers, display formatters and shell functions the session set (the notebook or
a library's call), and the output history (``Out``, ``_N``, ``_``, ``__``, ``___``).

Each entry is ``(name, capture, restore)`` as ``interpreter_state.register_state`` takes it;
without an IPython shell every capture is ``None``. ``remember_baseline(shell)`` (when the
extension loads) records the extensions a fresh kernel has loaded, its aliases, settings,
display printers and formatters and the functions set on the shell. Text taken
from cells (their source, ``%config`` lines, string outputs) is scrubbed of credentials as the
input history is (``session_state.without_credentials``).

The source of notebook code: notebook functions and classes keep the file names ipykernel gave
their cells (``graph`` pickles code with its ``co_filename``); this entry carries those cells'
lines and execution counts, so ``linecache`` finds the lines (tracebacks, warnings,
``inspect.getsource``) and IPython names them ``Cell In[N]`` as before.
"""

from __future__ import annotations

import contextlib
import functools
import io
import linecache
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from .session_state import without_credentials

_baseline: dict[str, Any] = {}

#: The line magics that change a setting of the shell (``%config Class.trait = value``,
#: ``%precision 3``, ``%xmode Verbose``, ``%pdb on``, ...), as typed in a cell.
_SETTING_LINE = re.compile(
    r"^[ \t]*(%(?:config[ \t]+\w+\.\w+[ \t]*=.*|(?:precision|xmode|pdb|autocall|automagic|colors)"
    r"\b.*))$", re.MULTILINE)


#: The key of how the shell reports exceptions among the settings (``_exception_reports``).
_REPORTS = "exception reports"


def remember_baseline(shell: Any) -> None:
    """Record the extensions loaded before the session's cells ran, this one included
    (idempotent)."""
    if "extensions" not in _baseline:
        _baseline["extensions"] = {*shell.extension_manager.loaded, __package__}
        _baseline["aliases"] = dict(shell.alias_manager.aliases)
        _baseline["settings"] = {which: _settings(made) for which, made in
                                 _configurables(shell).items()}
        _baseline["settings"][_REPORTS] = _exception_reports(shell)
        _baseline["printers"] = _printers(shell)
        _baseline["formatters"] = dict(shell.display_formatter.formatters)
        _baseline["shell_functions"] = _shell_functions(shell)


def the_shell() -> Any:
    """This kernel's IPython shell, or None (IPython not loaded, or no shell running)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


# -- source of notebook code -----------------------------------------------------------------

def _cell_sources() -> Any:
    """Every cell file IPython compiled (and the restored ones): its count and its lines."""
    shell = the_shell()
    if shell is None:
        return None
    sources = {name: (number, without_credentials(linecache.cache[name][2]))
               for name, number in shell.compile._filename_map.items() if name in linecache.cache}
    return sources or None


def _restore_cell_sources(sources: dict[str, tuple[int, list[str]]]) -> str | None:
    shell = the_shell()
    for name, (number, lines) in sources.items():
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)  # mtime None: kept
        if shell is not None:
            shell.compile._filename_map[name] = number
    return None


# -- extensions ------------------------------------------------------------------------------

def _extensions() -> Any:
    shell = the_shell()
    if shell is None:
        return None
    remember_baseline(shell)
    loaded = sorted(set(shell.extension_manager.loaded) - _baseline["extensions"])
    if not loaded:
        return None
    state: dict[str, Any] = {"loaded": loaded}
    magics = shell.magics_manager.registry.get("AutoreloadMagics")
    if magics is not None:  # loaded as IPython.extensions.autoreload
        reloader = magics._reloader
        mode = (0 if not reloader.enabled else 1 if not reloader.check_all
                else 3 if reloader.autoload_obj else 2)
        state["autoreload"] = (mode, sorted(reloader.modules), sorted(reloader.skip_modules))
    return state


def _restore_extensions(state: dict[str, Any]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    failed = []
    for name in state["loaded"]:
        try:
            if shell.extension_manager.load_extension(name) == "no load function":
                failed.append(f"{name} (no load function)")
        except ImportError as exc:
            failed.append(f"{name} ({exc})")
    if "autoreload" in state and "AutoreloadMagics" in shell.magics_manager.registry:
        mode, modules, skipped = state["autoreload"]
        shell.run_line_magic("autoreload", str(mode))
        for module in modules:
            shell.run_line_magic("aimport", module)
        for module in skipped:
            shell.run_line_magic("aimport", f"-{module}")
    return f"not loaded: {', '.join(failed)}" if failed else None


# -- %logstart, %pushd -----------------------------------------------------------------------

def _log_and_directories() -> Any:
    """The input log ``%logstart`` keeps (its file by absolute path: the process's descriptor
    says where it is, whatever the working directory is now; its mode and switches) and the
    directory stack of ``%pushd``. A fresh shell logs nothing and has an empty stack."""
    shell = the_shell()
    if shell is None:
        return None
    state: dict[str, Any] = {}
    logger = shell.logger
    if logger.log_active and logger.logfile is not None:
        try:
            path = os.readlink(f"/proc/self/fd/{logger.logfile.fileno()}")
        except OSError:  # no /proc here
            path = os.path.abspath(logger.logfname)
        state["log"] = {"logfname": path, "logmode": logger.logmode,
                        "log_output": logger.log_output, "timestamp": logger.timestamp,
                        "log_raw_input": logger.log_raw_input}
    if shell.dir_stack:
        state["dir_stack"] = list(shell.dir_stack)
    return state or None


def _restore_log_and_directories(state: dict[str, Any]) -> str | None:
    """The log started again on its file, appended to (never rotated or overwritten: it holds
    the session's input so far), then given its mode back; the stack put back."""
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    shell.dir_stack[:] = state.get("dir_stack", [])
    log = state.get("log")
    if log is None or shell.logger.log_active:
        return None
    try:
        shell.logger.logstart(**{**log, "logmode": "append"})
    except OSError as exc:
        return f"input log {log['logfname']} ({exc.strerror})"
    shell.logger.logmode = log["logmode"]
    return None


# -- from __future__ import ... ---------------------------------------------------------------

def _future_imports() -> Any:
    """The ``__future__`` features a cell imported (``from __future__ import annotations``): the
    shell's compiler keeps them for every later cell (``CachingCompiler.flags``), so after a
    resume a cell annotating with a name defined later raised ``NameError``."""
    import __future__

    shell = the_shell()
    if shell is None:
        return None
    features = [name for name in __future__.all_feature_names
                if shell.compile.flags & getattr(__future__, name).compiler_flag]
    return features or None


def _restore_future_imports(features: list[str]) -> None:
    import __future__

    shell = the_shell()
    for name in features:
        shell.compile.flags |= getattr(__future__, name).compiler_flag


# -- %alias ----------------------------------------------------------------------------------

def _aliases() -> Any:
    """The shell aliases the session defined or changed (``%alias``) and those it removed
    (``%unalias``), against a fresh shell's."""
    shell = the_shell()
    if shell is None:
        return None
    remember_baseline(shell)
    now, fresh = dict(shell.alias_manager.aliases), _baseline["aliases"]
    defined = {name: command for name, command in now.items() if fresh.get(name) != command}
    removed = sorted(set(fresh) - set(now))
    return {"defined": defined, "removed": removed} if defined or removed else None


def _restore_aliases(state: dict[str, Any]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    failed = []
    for name, command in state["defined"].items():
        try:
            shell.alias_manager.define_alias(name, command)
        except Exception as exc:  # IPython's AliasError: a name it refuses here
            failed.append(f"{name} ({exc})")
    for name in state["removed"]:
        with contextlib.suppress(ValueError):  # not defined here either
            shell.alias_manager.undefine_alias(name)
    return f"not defined: {', '.join(failed)}" if failed else None


# -- %config ---------------------------------------------------------------------------------

def _config_changes() -> Any:
    """The setting magics' lines of the input history (``_SETTING_LINE``), in order: run again
    from a fresh shell's settings, toggles (``%pdb``) end where they did."""
    shell = the_shell()
    if shell is None:
        return None
    lines = [match.rstrip() for cell in shell.history_manager.input_hist_raw if "%" in cell
             for match in _SETTING_LINE.findall(cell)]
    return without_credentials(lines) or None


def _restore_config_changes(lines: list[str]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    with contextlib.redirect_stdout(io.StringIO()):  # "Exception reporting mode: ..." was said
        for line in lines:
            # a snapshot of an earlier version holds the %config lines without their magic
            magic, _, argument = (line[1:].partition(" ") if line.startswith("%")
                                  else ("config", "", line))
            shell.run_line_magic(magic, argument.strip())
    return None


# -- settings set on the shell's objects -------------------------------------------------------

#: The simple values a setting of the shell's objects may hold to be carried.
_SIMPLE = (str, int, float, bool, type(None), list, tuple, dict, set)


def _configurables(shell: Any) -> dict[str, Any]:
    """The shell's objects whose settings a notebook sets by assignment: the shell, its
    completer, its plain-text formatter, and the inline backend's settings once made."""
    found = {"shell": shell, "completer": shell.Completer,
             "plain text": shell.display_formatter.formatters.get("text/plain")}
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    if inline is not None and inline.InlineBackend.initialized():
        found["inline backend"] = inline.InlineBackend.instance()
    return {which: made for which, made in found.items() if made is not None}


def _settings(configurable: Any) -> dict[str, Any]:
    """``configurable``'s configurable traits of simple values, by name."""
    values = {name: getattr(configurable, name) for name in configurable.trait_names(config=True)}
    return {name: value for name, value in values.items() if isinstance(value, _SIMPLE)}


def _expected(configurable: Any, shell: Any) -> dict[str, Any]:
    """What a configurable made after the extension loaded starts with: its defaults, under
    the kernel's configuration."""
    section = shell.config.get(type(configurable).__name__, {})
    return {name: section[name] if name in section else trait.default()
            for name, trait in configurable.traits(config=True).items()}


def _exception_reports(shell: Any) -> dict[str, Any]:
    """How the shell reports an exception: ``%xmode``'s mode and ``%pdb``'s switch, which those
    magics set on its traceback printer (``InteractiveTB``), not on a trait: called from code
    (``get_ipython().run_line_magic("xmode", "Minimal")``), not typed, they were lost."""
    return {"mode": shell.InteractiveTB.mode, "call_pdb": bool(shell.call_pdb)}


def _shell_settings() -> Any:
    """The settings of the shell's objects (``_configurables``) that differ from when the
    extension loaded, as set by assignment (``get_ipython().ast_node_interactivity = "all"``,
    ``shell.Completer.use_jedi = False``, ``set_matplotlib_close(False)``), and how it reports
    exceptions (``_exception_reports``); ``%config`` lines are that entry's, and come back the
    same (this entry is restored after it: the settings end as they were)."""
    shell = the_shell()
    if shell is None:
        return None
    changed, configurables = {}, _configurables(shell)
    current = {which: _settings(configurable) for which, configurable in configurables.items()}
    current[_REPORTS] = _exception_reports(shell)
    for which, settings in current.items():
        before = _baseline.get("settings", {}).get(which)
        if before is None:  # made since the extension loaded (the inline backend's)
            before = _expected(configurables[which], shell) if which in configurables else {}
        now = {name: value for name, value in settings.items()
               if name in before and value != before[name]}
        if now:
            changed[which] = now
    return changed or None


def _restore_shell_settings(changed: dict[str, dict[str, Any]]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    if "inline backend" in changed:  # made as the session's was
        from matplotlib_inline.backend_inline import InlineBackend

        InlineBackend.instance()
    configurables, refused = _configurables(shell), []
    for which, settings in changed.items():
        for name, value in settings.items():
            try:
                if which == _REPORTS and name == "mode":
                    shell.InteractiveTB.set_mode(mode=value)
                else:
                    setattr(shell if which == _REPORTS else configurables[which], name, value)
            except Exception as exc:  # a TraitError, or what the setting's observer raised
                refused.append(f"{which} {name} ({type(exc).__name__}: {exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


# -- the notebook's own hooks in the shell --------------------------------------------------

def _module_of(value: Any) -> str:
    """The module that defined a function or class, or a bound method's function. Only what
    the object's type defines is read: IPython 9 keeps its own magics as ``LazyMagic``
    stand-ins, and any attribute read through one's ``__getattr__`` imports and registers the
    real magic (a checkpoint would load all of them and change the shell it saves)."""
    function = value.__func__ if hasattr(type(value), "__func__") else value
    return getattr(function, "__module__", None) or ""


def _notebook_made(value: Any) -> bool:
    """A function of the notebook, or a method of a notebook object (``__main__``)."""
    return _module_of(value) == "__main__"


#: The shell's lists of code transformers: of cell text (``input_transformers_cleanup``,
#: ``input_transformers_post``: functions of a list of lines) and of the parsed cell
#: (``ast_transformers``: ``ast.NodeTransformer`` instances).
_TRANSFORMERS = ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")


#: Where the kernel's own display printers come from (IPython's, ipykernel's, the inline
#: backend's, which the "matplotlib figure formats" entry carries) and this product's.
_KERNEL_MODULES = ("IPython", "ipykernel", "matplotlib_inline", "kernel_hooks", "jupyter_gkeresume")


def _printers(shell: Any) -> dict[tuple[str, str, Any], Any]:
    """Every display printer of the shell: ``(mime, "type_printers" or "deferred_printers",
    type or (module, name)) -> printer``."""
    return {(mime, kind, key): printer
            for mime, formatter in shell.display_formatter.formatters.items()
            for kind in ("type_printers", "deferred_printers")
            for key, printer in getattr(formatter, kind, {}).items()}


def _kernels(value: Any) -> bool:
    """Whether ``value`` (a function, a bound method, a ``functools.partial`` of one, a class) is
    the kernel's own (``_KERNEL_MODULES``)."""
    value = value.func if isinstance(value, functools.partial) else value
    return _module_of(value).partition(".")[0] in _KERNEL_MODULES


def _shell_functions(shell: Any) -> dict[str, Any]:
    """The callables set on the shell object itself (``ip.showtraceback = ...``)."""
    return {name: value for name, value in vars(shell).items() if callable(value)}


def _shell_hooks() -> Any:
    """What the session registered in the shell: the notebook's magics (``@register_line_magic``,
    ``register_magics`` of a notebook class), event callbacks (``events.register``) and code
    transformers (``_TRANSFORMERS``); and, by any code but the kernel's (``_kernels``), the
    display printers registered since the extension loaded (``formatter.for_type``: the
    notebook's, and those a library's call registered, ``sympy.init_printing()``, which a fresh
    kernel's imports do not), the display formatters replaced (``rich.pretty.install()``) and
    the functions set on the shell object (``rich.traceback.install()`` sets its
    ``showtraceback``)."""
    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    shell = the_shell()
    if shell is None:
        return None
    magics = [(kind, name, magic) for kind, table in shell.magics_manager.magics.items()
              for name, magic in table.items() if _notebook_made(magic)]
    printers_before = _baseline.get("printers", {})
    formatters_before = _baseline.get("formatters", {})
    functions_before = _baseline.get("shell_functions", {})
    found = {
        # a Magics class holds the shell: it is registered again, as a class
        "magic_classes": list(dict.fromkeys(type(m.__self__) for _, _, m in magics
                                            if hasattr(m, "__self__"))),
        "magics": [(kind, name, m) for kind, name, m in magics if not hasattr(m, "__self__")],
        "events": [(event, callback) for event, callbacks in shell.events.callbacks.items()
                   for callback in callbacks if _notebook_made(callback)],
        "printers": [(*place, printer) for place, printer in _printers(shell).items()
                     if printers_before.get(place) is not printer and not _kernels(printer)],
        "formatters": [(mime, formatter) for mime, formatter
                       in shell.display_formatter.formatters.items()
                       if formatters_before.get(mime, formatter) is not formatter
                       and not _kernels(type(formatter))],
        "shell_functions": [(name, value) for name, value in _shell_functions(shell).items()
                            if functions_before.get(name) is not value and not _kernels(value)],
        "transformers": [(kind, transformer) for kind in _TRANSFORMERS
                         for transformer in getattr(shell, kind, ()) if _notebook_made(transformer)],
    }
    # each that would not come back whole is named at resume, alone (a callback over the shell)
    hooks: dict[str, list] = {kind: [] for kind in found}
    hooks["lost"] = []
    for kind, items in found.items():
        for item in items:
            why = why_not_whole(item)
            if why is None:
                hooks[kind].append(item)
            else:
                hooks["lost"].append(f"{kind[:-1].replace('_', ' ')} {_hook_name(item)} ({why})")
    return hooks if any(hooks.values()) else None


def _hook_name(item: Any) -> str:
    hook = item[-1] if isinstance(item, tuple) else item
    return getattr(hook, "__qualname__", type(hook).__name__)


def _restore_shell_hooks(hooks: dict[str, list[tuple]]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    for magics_class in hooks["magic_classes"]:
        shell.register_magics(magics_class)
    for kind, name, magic in hooks["magics"]:
        shell.magics_manager.register_function(magic, kind, name)
    for event, callback in hooks["events"]:
        if callback not in shell.events.callbacks[event]:
            shell.events.register(event, callback)
    for mime, formatter in hooks.get("formatters", ()):  # before the printers set on it
        shell.display_formatter.formatters[mime] = formatter
    for mime, kind, key, printer in hooks["printers"]:
        getattr(shell.display_formatter.formatters[mime], kind)[key] = printer
    for name, function in hooks.get("shell_functions", ()):
        setattr(shell, name, function)
    for kind, transformer in hooks.get("transformers", ()):  # after the fresh shell's own
        getattr(shell, kind).append(transformer)
    return ", ".join(hooks["lost"]) or None


# -- output history --------------------------------------------------------------------------

#: Output values that always pickle whole: no dry run for them.
_PLAIN_OUTPUTS = (str, bytes, int, float, complex, bool, type(None))


@dataclass(frozen=True)
class _Variable:
    """An output that is the value of the user's variable ``name`` (``df`` as a cell's last
    line): it travels as that variable, which is pickled anyway, and comes back as it."""

    name: str


@dataclass(frozen=True)
class _Lost:
    """An output left out at checkpoint, and why."""

    why: str


def _outputs() -> Any:
    """``Out`` (the values ``_N`` name) and what ``_``, ``__``, ``___`` hold. An output that
    would not come back whole (its pickling raises, or holds a lock, a file ...) is left out and
    noted, so that one such value costs itself, named at resume, not the whole history."""
    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    shell = the_shell()
    if shell is None or not shell.history_manager.output_hist:
        return None
    variables = {id(value): name for name, value in shell.user_ns.items()
                 if not name.startswith("_") and name not in shell.user_ns_hidden}
    reasons: dict[int, str | None] = {}  # by id: ``_`` is mostly the last output

    def carried(value: Any) -> Any:
        if isinstance(value, _PLAIN_OUTPUTS):
            return value
        if id(value) in variables:
            return _Variable(variables[id(value)])
        if id(value) not in reasons:
            reasons[id(value)] = why_not_whole(value)
        return value if reasons[id(value)] is None else _Lost(reasons[id(value)])

    out = {number: carried(value) for number, value in shell.history_manager.output_hist.items()}
    unders = [carried(shell.user_ns.get(name, "")) for name in ("_", "__", "___")]
    return {"out": dict(zip(out, _scrubbed(list(out.values())), strict=True)),
            "unders": _scrubbed(unders)}


def _scrubbed(values: list[Any]) -> list[Any]:
    """``values`` with credentials scrubbed out of its strings (the other values as they are)."""
    texts = [i for i, value in enumerate(values) if isinstance(value, str)]
    values = list(values)
    for i, text in zip(texts, without_credentials([values[i] for i in texts]), strict=True):
        values[i] = text
    return values


def _restore_outputs(state: dict[str, Any]) -> str | None:
    shell = the_shell()
    if shell is None:
        return "no IPython shell here"
    lost: list[str] = []

    def value(number: Any, carried: Any) -> Any:
        if isinstance(carried, _Variable):
            if carried.name in shell.user_ns:
                return shell.user_ns[carried.name]
            carried = _Lost(f"its variable {carried.name} did not come back")
        if isinstance(carried, _Lost):
            if number is not None:
                lost.append(f"Out[{number}] ({carried.why})")
            return _ABSENT
        return carried

    out = {number: value(number, carried) for number, carried in state["out"].items()}
    out = {number: v for number, v in out.items() if v is not _ABSENT}
    shell.history_manager.output_hist.update(out)
    shell.user_ns.update({f"_{number}": v for number, v in out.items()})
    unders = [value(None, carried) for carried in state["unders"]]
    unders = ["" if v is _ABSENT else v for v in unders]
    hook = shell.displayhook
    hook._, hook.__, hook.___ = unders
    shell.user_ns.update(zip(("_", "__", "___"), unders, strict=True))
    return ", ".join(lost) or None


_ABSENT = object()


# -- streams a cell redirected ----------------------------------------------------------------

def _redirected_streams() -> Any:
    """``sys.stdout`` or ``sys.stderr`` a cell redirected and left so (``redirect_stdout``
    entered by hand): not done again at resume (the object the redirection keeps comes back as
    the resumed kernel's stream, so its exit works), but named: until then, output shows."""
    from .live_objects import redirected_streams

    return redirected_streams() or None


def _name_redirected_streams(names: list[str]) -> str:
    return (f"not redirected again: {', '.join(f'sys.{name}' for name in names)} (a cell "
            "redirected it and it still was at the pause: output shows until the redirection "
            "ends)")


ENTRIES = (
    ("source of notebook code", _cell_sources, _restore_cell_sources),
    ("IPython extensions", _extensions, _restore_extensions),
    ("IPython %config", _config_changes, _restore_config_changes),
    ("IPython settings", _shell_settings, _restore_shell_settings),
    ("IPython aliases", _aliases, _restore_aliases),
    ("future imports", _future_imports, _restore_future_imports),
    ("IPython input log and directory stack", _log_and_directories, _restore_log_and_directories),
    ("IPython hooks of the notebook", _shell_hooks, _restore_shell_hooks),
    ("IPython output history", _outputs, _restore_outputs),
    ("redirected streams", _redirected_streams, _name_redirected_streams),
)
