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

Invariant: nothing is imported; the library types come from ``sys.modules``, and every object
costs one ``isinstance`` check.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

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
        self._any = tuple(t for t in (self._struct, self._system_random, self._draw) if t)

    def reduce(self, obj: object, note: RecordNote) -> tuple | None:
        """A reduce tuple that makes ``obj`` again, or None: not one of these. One that cannot
        be made again faithfully is noted in ``note``."""
        if not isinstance(obj, self._any):
            return None
        if self._struct is not None and isinstance(obj, self._struct):
            return type(obj), (obj.format,)
        if self._system_random is not None and isinstance(obj, self._system_random):
            return system_random, (type(obj), dict(vars(obj)))
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
