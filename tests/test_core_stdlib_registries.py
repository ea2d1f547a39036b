"""Registries of the standard library a notebook adds to, carried across a cut
(``kernel_hooks.stdlib_registries``, the ``python settings`` and numpy entries of
``kernel_hooks.library_state``, ``kernel_hooks.registrations``). Each lived in the old process
only, so after a resume it was gone while the verdict said ``exact`` (found by probes): the next
``INSERT`` of a ``Decimal`` failed ("type 'decimal.Decimal' is not supported"),
``'x'.encode('myalias')`` raised ``LookupError``, requests went out without the opener's headers
or the default timeout, ``shutil.make_archive`` refused the format, ``mimetypes`` no longer knew
the extension, ``asyncio`` made loops with its default policy, NumPy's error callback and ufunc
buffer size (``np.setbufsize``, stop 54) were gone and a level ``addLevelName`` named printed as
"Level 25", a module a finder of the notebook made could not be imported, and a csv dialect the
notebook registered was unknown and its raised field size limit back to 128 KiB; an error handler
``codecs.register_error`` named was unknown and ``scipy.special.seterr`` was off (stop 54). Kernel A sets
them over several cells and observes them, checkpoints and dies; kernel B resumes and observes the
same."""

from __future__ import annotations

from fixtures_kernels import resumed_elsewhere

SESSION = r"""
import asyncio, codecs, decimal, mimetypes, shutil, socket, sqlite3, urllib.request
import numpy as np

sqlite3.register_adapter(decimal.Decimal, str)
sqlite3.register_converter("DEC", lambda raw: decimal.Decimal(raw.decode()))

def find_alias(name):
    return codecs.lookup("utf-8") if name == "myalias" else None

codecs.register(find_alias)
codecs.register_error("qmark", lambda error: ("?", error.end))
import scipy.special
scipy.special.seterr(singular="raise")
codecs.register(lambda name: None)
codecs.unregister(codecs.lookup)  # never registered: changes nothing

opener = urllib.request.build_opener()
opener.addheaders = [("User-agent", "notebook/1")]
urllib.request.install_opener(opener)
socket.setdefaulttimeout(7)

def make_probe(base_name, root_dir, **kwargs):
    return base_name + ".probe"

shutil.register_archive_format("probe", make_probe, description="probe archive")
shutil.register_unpack_format("probe", [".probe"], lambda name, extract_dir: None)
mimetypes.add_type("application/x-probe", ".probe")

class NotebookPolicy(asyncio.DefaultEventLoopPolicy):
    pass

asyncio.set_event_loop_policy(NotebookPolicy())
np.seterrcall(print)
np.setbufsize(16384)
import logging
logging.addLevelName(25, "NOTICE")

import importlib.abc, importlib.util, sys

class GeneratedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "generated_config":
            return importlib.util.spec_from_loader(name, self)
        return None

    def exec_module(self, module):
        module.VALUE = 42

sys.meta_path.insert(0, GeneratedModules())
import csv
csv.register_dialect("semicolons", delimiter=";", quoting=csv.QUOTE_MINIMAL)
csv.field_size_limit(10**8)
"""
OBSERVE = r"""
import asyncio, codecs, decimal, json, mimetypes, shutil, socket, sqlite3, urllib.request
import numpy as np

def stored_decimal():
    with sqlite3.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES) as db:
        db.execute("create table t (x DEC)")
        db.execute("insert into t values (?)", (decimal.Decimal("1.5"),))
        return repr(db.execute("select x from t").fetchone()[0])

print(json.dumps([
    stored_decimal(), "x".encode("myalias").decode(),
    urllib.request._opener.addheaders, socket.getdefaulttimeout(),
    [name for name, _ in shutil.get_archive_formats() if name == "probe"],
    [name for name, *_ in shutil.get_unpack_formats() if name == "probe"],
    mimetypes.guess_type("model.probe")[0], mimetypes.guess_extension("application/x-probe"),
    type(asyncio.get_event_loop_policy()).__name__, np.geterrcall() is print, np.getbufsize(),
    mimetypes.guess_type("page.html")[0], __import__("logging").getLevelName(25),
    __import__("generated_config").VALUE,
    __import__("csv").get_dialect("semicolons").delimiter, __import__("csv").field_size_limit(),
    b"a\xffb".decode("ascii", "qmark"), __import__("scipy.special").special.geterr()["singular"],
]))
"""


def test_the_registries_a_notebook_added_to_come_back(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    expected = a.run_json(OBSERVE)
    assert expected == ["Decimal('1.5')", "x", [["User-agent", "notebook/1"]], 7.0, ["probe"],
                        ["probe"], "application/x-probe", ".probe", "NotebookPolicy", True, 16384,
                        "text/html", "NOTICE", 42, ";", 10**8, "a?b", "raise"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    for entry in ("python settings", "numpy print options and seterr", "sqlite3 adapters",
                  "codec search functions", "urllib opener", "shutil archive formats",
                  "MIME types", "asyncio event loop policy", "logging level names",
                  "import finders", "csv dialects and field size limit", "codec error handlers",
                  "scipy.special errors"):
        assert entry in out, (entry, out)
    assert b.run_json(OBSERVE) == expected


def test_a_fresh_kernel_carries_none_of_them(start_kernel):
    """What a kernel has by itself (the libraries' own adapters, codecs and formats, the system's
    MIME types) is not carried: nothing is named or restored for it."""
    a = start_kernel()
    a.run("import asyncio, codecs, csv, mimetypes, shutil, sqlite3, urllib.request, scipy.special\n"
          "mimetypes.init()\nprint('x'.encode('latin-1'))")
    _, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    for entry in ("sqlite3 adapters", "codec search functions", "urllib opener",
                  "shutil archive formats", "MIME types", "asyncio event loop policy",
                  "logging level names", "import finders", "csv dialects", "codec error handlers",
                  "scipy.special errors"):
        assert entry not in out, (entry, out)
