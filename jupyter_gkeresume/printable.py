"""Stored strings as safe text for terminals, logs and the lab: ``printable(value)``.

Anything read from the store (a manifest's workspace, key id, notebook, object names, a record's
reason, a lease's holder, an object name) may have been written by someone else. Shown as is, a
control character clears a terminal, sets its title, or starts a forged log line. ``printable``
keeps every printable character (any script) and writes each other one (control characters,
line and paragraph separators, bidirectional overrides, unassigned code points) as its Python
escape, so the text stays one line and says what was there. Call it where a stored string
reaches a person, not before: the stored value itself is never changed.
"""

from __future__ import annotations


def printable(value: object) -> str:
    """``value`` (``str()`` of it when not a string) with every non-printable character escaped:
    ``"ok\\x1b[2J"`` becomes ``"ok\\\\x1b[2J"``."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)
