"""Ask a fresh interpreter of this Python, so that this process imports nothing for the answer.

``ask_child(code, *args)`` runs ``code`` in ``sys.executable -c`` with ``args`` as its
``sys.argv[1:]``; the child prints its answer as JSON on its last line of stdout. Used where the
answer needs a module that a kernel must not gain from the product's own lookups (a third-party
finder on ``sys.meta_path``, ``packaging.tags``: issue 28 item 4): a resumed kernel imports what
the session had, nothing else. ``None`` when the child fails, answers no JSON or takes longer than
``CHILD_TIMEOUT``; the caller says what it then cannot tell.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

CHILD_TIMEOUT = 30.0  # seconds


def ask_child(code: str, *args: str) -> Any:
    """The JSON value ``code`` prints last in a child interpreter, or None (see the module
    docstring)."""
    try:
        run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                             timeout=CHILD_TIMEOUT, check=True, stdin=subprocess.DEVNULL)
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
