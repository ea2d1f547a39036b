"""Objects pickle refuses although all they hold is what made them: made again at the resume.

Call order: the graph pickler (``graph``) asks ``Remade.reduce(obj)`` for every object after the
live objects (``live_objects``) and before the generic placeholders; ``None`` means "not one of
these" (or one that cannot be made again faithfully: it is then pickled, or named, as before).

- ``struct.Struct`` is its format: ``Struct(format)`` again.
- ``random.SystemRandom`` draws from the operating system and has no state to carry: a new one,
  with the attributes set on the instance. (``Random.__reduce__`` asks for its state, which it
  refuses: ``NotImplementedError``.)
- A Pillow drawing context (``ImageDraw.Draw(image)``) is a view of its image's pixels, which
  travel with the image: ``ImageDraw(image, mode)`` again on the same restored image, with its
  settings (ink, fill, font, fontmode). One drawing into pixels its image no longer shows (an
  operation gave the image new ones, such as ``thumbnail``) cannot be made again: it is named
  (``note.placeholder``).

- A regular expression match (``m = re.search(...)``) is what its pattern finds in its string:
  the call that gives the same groups at the same places is made again (``search``, ``match``
  or ``fullmatch`` from its ``pos``, else from where it starts: the n-th match of a
  ``finditer``, whose ``pos`` is then that start). One that no such call makes again is named.
- A generator holds a frame, which nothing pickles. One not started yet (a generator expression
  not iterated, ``pending = batches(data, 32)``, the generator a ``contextlib.contextmanager``
  decorator keeps) holds nothing but its function's arguments and closure: its function is
  called again with them (the notebook's own function where it still is the one that made it,
  so it reads the restored namespace). One finished (``total = sum(gen)`` leaves ``gen``) holds
  nothing: a generator of the same code, closed before it starts. One that has run part way is
  not made again (it is named, as every generator was before).

Invariant: nothing is imported; the library types come from ``sys.modules``, and every object
costs one ``isinstance`` check.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import TYPE_CHECKING, Any

from .placeholders import REMADE_GENERATORS

if TYPE_CHECKING:
    from .graph import RecordNote

#: A drawing context's attributes that are its image's pixels (made again from the image).
_DRAW_MADE = ("_image", "im", "draw", "palette")


class Remade:
    """Reductions for one graph (the types are looked up once, from ``sys.modules``)."""

    def __init__(self) -> None:
        self._struct = getattr(sys.modules.get("_struct"), "Struct", None)
        self._system_random = getattr(sys.modules.get("random"), "SystemRandom", None)
        self._draw = getattr(sys.modules.get("PIL.ImageDraw"), "ImageDraw", None)
        self._match = getattr(sys.modules.get("re"), "Match", None)
        self._any = tuple(t for t in (self._struct, self._system_random, self._draw,
                                      types.GeneratorType, self._match) if t)

    def reduce(self, obj: object, note: RecordNote) -> tuple | None:
        """A reduce tuple that makes ``obj`` again, or None: not one of these. One that cannot
        be made again faithfully is noted in ``note``."""
        if not isinstance(obj, self._any):
            return None
        if self._struct is not None and isinstance(obj, self._struct):
            return type(obj), (obj.format,)
        if self._system_random is not None and isinstance(obj, self._system_random):
            return system_random, (type(obj), dict(vars(obj)))
        if type(obj) is types.GeneratorType:
            return _generator_reduce(obj)
        if type(obj) is self._match:
            return _match_reduce(obj)
        return _draw_reduce(obj) or note.placeholder(obj, (
            "a drawing context on pixels its image no longer shows (an operation gave the image "
            "new ones): make it again with ImageDraw.Draw(image) after the resume"))


def system_random(cls: type, attributes: dict[str, Any]) -> Any:
    made = cls()
    vars(made).update(attributes)
    return made


def _draw_reduce(draw: Any) -> tuple | None:
    state = dict(vars(draw))
    image = state.get("_image")
    if image is None or getattr(image, "im", None) is not state.get("im"):
        return None
    settings = {name: value for name, value in state.items() if name not in _DRAW_MADE}
    return drawing, (type(draw), image, settings)


def drawing(cls: type, image: Any, settings: dict[str, Any]) -> Any:
    made = cls(image, settings.get("mode"))
    vars(made).update(settings)
    return made


def _generator_reduce(made: types.GeneratorType) -> tuple | None:
    """``generator``'s call for a generator not started or finished, else None."""
    state = inspect.getgeneratorstate(made)
    if state not in REMADE_GENERATORS:
        return None
    code = made.gi_code
    names = code.co_varnames
    positional, keywords = code.co_argcount, code.co_kwonlyargcount
    if state == inspect.GEN_CLOSED:  # any arguments: nothing of it runs
        return generator, (_function_over(made, {}, {}), (None,) * positional,
                           dict.fromkeys(names[positional:positional + keywords]), True)
    frame = made.gi_frame
    values = frame.f_locals  # before it starts: its arguments and closure
    args = [values[name] for name in names[:positional]]
    kwargs = {name: values[name] for name in names[positional:positional + keywords]}
    rest = iter(names[positional + keywords:])
    if code.co_flags & inspect.CO_VARARGS:
        args.extend(values[next(rest)])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(values[next(rest)])
    function = (_function_of(made, frame.f_globals)
                or _function_over(made, frame.f_globals, values))
    return generator, (function, tuple(args), kwargs, False)


def _function_over(made: types.GeneratorType, namespace: dict, values: Any) -> Any:
    """A function of ``made``'s code and name over ``namespace``, its closure holding what
    ``values`` has for each free variable (an empty cell where it has nothing)."""
    code = made.gi_code
    function = types.FunctionType(code, namespace, code.co_name, None, tuple(
        types.CellType(values[name]) if name in values else types.CellType()
        for name in code.co_freevars))
    function.__qualname__ = made.__qualname__
    return function


def _function_of(made: types.GeneratorType, namespace: dict) -> Any:
    """The function that made ``made``, where its module (or the notebook's namespace) still
    holds it under its qualified name, else None (a nested or redefined function)."""
    module = sys.modules.get(namespace.get("__name__", ""))
    if module is None or vars(module) is not namespace:
        return None
    found: Any = module
    for part in made.__qualname__.split("."):
        found = vars(found).get(part) if hasattr(found, "__dict__") else None
    found = getattr(found, "__func__", found)  # a static or class method
    return found if getattr(found, "__code__", None) is made.gi_code else None


def generator(function: Any, args: tuple, kwargs: dict[str, Any], finished: bool) -> Any:
    """A generator again (``Remade``): ``function`` called, and closed if it had finished."""
    made = function(*args, **kwargs)
    if finished:
        made.close()
    return made


def _match_reduce(found: Any) -> tuple | None:
    """``matched``'s call for a regular expression match, or None where none makes it again."""
    for pos in dict.fromkeys((found.pos, found.start())):
        for call in ("search", "match", "fullmatch"):
            again = getattr(found.re, call)(found.string, pos, found.endpos)
            if again is not None and again.regs == found.regs:
                return matched, (found.re, call, found.string, pos, found.endpos)
    return None


def matched(pattern: Any, call: str, string: Any, pos: int, endpos: int) -> Any:
    """A regular expression match again (``Remade``): ``pattern``'s ``call`` on ``string``."""
    return getattr(pattern, call)(string, pos, endpos)
