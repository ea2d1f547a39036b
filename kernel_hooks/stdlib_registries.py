"""``interpreter_state`` entries for registries of the standard library a session adds to, which a
fresh process has without the session's entries: ``sqlite3`` adapters and converters, codec search
functions (``codecs.register``) and error handlers (``codecs.register_error``), the opener
``urllib.request.urlopen`` uses (``install_opener``), ``shutil``'s archive and unpack formats, the
MIME types ``mimetypes`` learnt (``add_type``), ``asyncio``'s event loop policy, ``logging``'s
level names (``addLevelName``), ``csv``'s dialects and field size limit and the notebook's import
finders (``sys.meta_path``, ``sys.path_hooks``).

Only what the session added travels: an adapter or converter the kernel did not have when the
extension loaded (``remember_baseline``), an adapter, converter or format whose function is not
the registering module's own (``_own``: the module registers those itself when it is imported), a
codec search function of the notebook or its own modules (``registrations`` notes each
``codecs.register``), an installed opener, a MIME type a fresh ``mimetypes.init()`` does not
read from the system's files, a policy of another class than the default, a level name the
kernel did not have at load, a finder or path hook of the notebook. Each capture answers
``None`` when its module is not loaded (``sys.modules``, never an import) or nothing was added;
each restore sets the entries again through the module's own functions, or names what it could
not (a policy class that needs arguments).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from . import registrations
from .library_state import the_sessions

_baseline: dict[str, dict] = {}


def remember_baseline() -> None:
    """Record the sqlite3 adapters and converters the kernel has when the extension loads
    (IPython's history registers one) and logging's level names, idempotent: those are not the
    session's."""
    if _baseline:
        return
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None:
        _baseline.update(adapters=dict(sqlite3.adapters), converters=dict(sqlite3.converters))
    _baseline["level_names"] = dict(logging._levelToName)


def _added(registry: dict, baseline: dict, module: str) -> dict:
    """The entries of ``registry`` not in ``baseline`` whose function is not ``module``'s own
    (``_own``)."""
    return {key: value for key, value in list(registry.items())
            if baseline.get(key) is not value and not _own(value, module)}


def _own(function: Any, module: str) -> bool:
    """Whether ``function`` (or what a ``functools.partial`` calls) is defined in ``module`` or
    its submodules: what the module registers itself when it is imported."""
    defined_in = getattr(getattr(function, "func", function), "__module__", None) or ""
    return defined_in == module or defined_in.startswith(module + ".")


def _sqlite_adapters() -> Any:
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is None:
        return None
    adapters = {kind: adapt for (kind, protocol), adapt in _added(
        sqlite3.adapters, _baseline.get("adapters", {}), "sqlite3").items()
        if protocol is sqlite3.PrepareProtocol}
    converters = _added(sqlite3.converters, _baseline.get("converters", {}), "sqlite3")
    return (adapters, converters) if adapters or converters else None


def _restore_sqlite_adapters(state: tuple[dict[type, Callable], dict[str, Callable]]) -> None:
    import sqlite3

    adapters, converters = state
    for kind, adapt in adapters.items():
        sqlite3.register_adapter(kind, adapt)
    for name, convert in converters.items():
        sqlite3.register_converter(name, convert)


def _level_names() -> Any:
    """The level names the session gave (``logging.addLevelName(25, "NOTICE")``)."""
    before = _baseline.get("level_names", {})
    added = {level: name for level, name in list(logging._levelToName.items())
             if before.get(level) != name}
    return added or None


def _restore_level_names(added: dict[int, str]) -> None:
    for level, name in added.items():
        logging.addLevelName(level, name)


def _codec_search_functions() -> Any:
    mine = [func for func, _, _ in registrations.registered("codecs") if the_sessions(func)]
    return mine or None


def _restore_codec_search_functions(functions: list[Callable]) -> None:
    import codecs

    for function in functions:
        codecs.register(function)


def _codec_error_handlers() -> Any:
    """The notebook's handlers registered with ``codecs.register_error`` (noted as registered:
    CPython cannot list them) that are still the ones under their names."""
    import codecs

    noted = registrations.registered(registrations.ERROR_HANDLERS)
    mine = [(name, handler) for handler, (name,), _ in noted
            if the_sessions(handler) and codecs.lookup_error(name) is handler]
    return mine or None


def _restore_codec_error_handlers(handlers: list[tuple[str, Callable]]) -> None:
    import codecs

    for name, handler in handlers:
        codecs.register_error(name, handler)


def _import_finders() -> Any:
    """The notebook's finders in ``sys.meta_path`` (a class of its own, or an instance of one),
    with their places, and its ``sys.path_hooks``."""
    finders = [(place, finder) for place, finder in enumerate(sys.meta_path)
               if the_sessions(finder) or the_sessions(type(finder))]
    hooks = [(place, hook) for place, hook in enumerate(sys.path_hooks) if the_sessions(hook)]
    return (finders, hooks) if finders or hooks else None


def _restore_import_finders(state: tuple[list[tuple[int, Any]], list[tuple[int, Any]]]) -> None:
    finders, hooks = state
    for place, finder in finders:
        sys.meta_path.insert(place, finder)
    for place, hook in hooks:
        sys.path_hooks.insert(place, hook)
    sys.path_importer_cache.clear()  # made with the hooks before


def _urllib_opener() -> Any:
    request = sys.modules.get("urllib.request")
    return getattr(request, "_opener", None)  # install_opener's, None until one is used


def _restore_urllib_opener(opener: Any) -> None:
    import urllib.request

    urllib.request.install_opener(opener)


def _shutil_formats() -> Any:
    shutil = sys.modules.get("shutil")
    if shutil is None:
        return None
    archive = {name: entry for name, entry in list(shutil._ARCHIVE_FORMATS.items())
               if not _own(entry[0], "shutil")}
    unpack = {name: entry for name, entry in list(shutil._UNPACK_FORMATS.items())
              if not _own(entry[1], "shutil")}
    return (archive, unpack) if archive or unpack else None


def _restore_shutil_formats(state: tuple[dict[str, tuple], dict[str, tuple]]) -> str | None:
    import shutil

    archive, unpack = state
    refused = []
    for name, entry in archive.items():
        # as register_archive_format sets it, with the supports_root_dir flag it cannot take
        shutil._ARCHIVE_FORMATS[name] = entry
    for name, (extensions, function, extra_args, *description) in unpack.items():
        try:
            shutil.register_unpack_format(name, extensions, function, extra_args, *description)
        except shutil.RegistryError as exc:  # an extension this kernel gives another format
            refused.append(f"{name} ({exc})")
    return f"not accepted here: {', '.join(refused)}" if refused else None


def _mime_types() -> Any:
    """``(type, extension, strict)`` of each mapping the session's ``mimetypes`` has and one
    read as ``init()`` reads (the built-in table, then the system's files) has not."""
    mimetypes = sys.modules.get("mimetypes")
    if mimetypes is None or not mimetypes.inited:
        return None
    fresh = mimetypes.MimeTypes()
    for name in mimetypes.knownfiles:
        try:
            fresh.read(name)
        except OSError:  # not on this system
            continue
    added = [(kind, extension, strict)
             for strict, known in ((True, mimetypes._db.types_map[True]),
                                   (False, mimetypes._db.types_map[False]))
             for extension, kind in known.items()
             if fresh.types_map[strict].get(extension) != kind]
    return added or None


def _restore_mime_types(added: list[tuple[str, str, bool]]) -> None:
    import mimetypes

    for kind, extension, strict in added:
        mimetypes.add_type(kind, extension, strict)


#: The dialects ``csv`` registers itself, and its field size limit in a fresh process.
_CSV_DIALECTS = frozenset({"excel", "excel-tab", "unix"})
_CSV_FIELD_LIMIT = 131072
_CSV_PARAMETERS = ("delimiter", "quotechar", "escapechar", "doublequote", "skipinitialspace",
                   "lineterminator", "quoting", "strict")


def _csv_settings() -> Any:
    """The dialects the session registered (``csv.register_dialect("semi", delimiter=";")``),
    each with its parameters, and the field size limit it set (``csv.field_size_limit``: the
    usual fix for "field larger than field limit"); both live in the ``_csv`` extension."""
    csv = sys.modules.get("csv")
    if csv is None:
        return None
    dialects = {name: {key: getattr(csv.get_dialect(name), key) for key in _CSV_PARAMETERS}
                for name in csv.list_dialects() if name not in _CSV_DIALECTS}
    limit = csv.field_size_limit()
    if not dialects and limit == _CSV_FIELD_LIMIT:
        return None
    return {"dialects": dialects, "field_size_limit": limit}


def _restore_csv_settings(settings: dict[str, Any]) -> str | None:
    import csv

    refused = []
    for name, parameters in settings["dialects"].items():
        try:
            csv.register_dialect(name, **parameters)
        except (TypeError, csv.Error) as exc:
            refused.append(f"dialect {name} ({exc})")
    csv.field_size_limit(settings["field_size_limit"])
    return f"not accepted here: {', '.join(refused)}" if refused else None


def _event_loop_policy() -> Any:
    asyncio = sys.modules.get("asyncio")
    policy = getattr(sys.modules.get("asyncio.events"), "_event_loop_policy", None)
    if policy is None or type(policy) is asyncio.DefaultEventLoopPolicy:
        return None
    return type(policy)  # set_event_loop_policy's, of another class than the platform's


def _restore_event_loop_policy(policy_class: type) -> str | None:
    import asyncio

    try:
        policy = policy_class()
    except TypeError as exc:
        return f"{policy_class.__qualname__}() needs arguments ({exc})"
    asyncio.set_event_loop_policy(policy)
    return None


ENTRIES = (
    ("logging level names", _level_names, _restore_level_names),
    ("sqlite3 adapters and converters", _sqlite_adapters, _restore_sqlite_adapters),
    ("codec search functions", _codec_search_functions, _restore_codec_search_functions),
    ("codec error handlers", _codec_error_handlers, _restore_codec_error_handlers),
    ("import finders", _import_finders, _restore_import_finders),
    ("urllib opener", _urllib_opener, _restore_urllib_opener),
    ("shutil archive formats", _shutil_formats, _restore_shutil_formats),
    ("MIME types", _mime_types, _restore_mime_types),
    ("asyncio event loop policy", _event_loop_policy, _restore_event_loop_policy),
    ("csv dialects and field size limit", _csv_settings, _restore_csv_settings),
)
