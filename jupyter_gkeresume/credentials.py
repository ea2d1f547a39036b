"""What looks like a credential, and text with credentials masked: the one place both are decided.

Used by the kernel (``kernel_hooks.session_state``: environment variables that look like
credentials are never saved; their values are scrubbed from the input history a snapshot keeps)
and by the store (``snapshot.store.describe``: error and log messages). Deciding on the safe side
is the point: a variable wrongly taken for a credential is only reported as "not saved", a
credential wrongly taken for a setting would reach the bucket in clear.

- ``name_looks_secret(name)``: ``*KEY*``, ``*TOKEN*`` (not ``TOKENIZER``: Hugging Face's
  ``TOKENIZERS_PARALLELISM``), ``*SECRET*``, ``*PASSW*`` (PASSWORD, PASSWD),
  ``*CREDENTIAL*``, and ``PASS``, ``PWD``, ``AUTH`` as a whole ``_``-separated word (``DB_PASS``,
  ``MYSQL_PWD``, ``REDIS_AUTH``; ``PWD`` itself, ``OLDPWD`` and ``GIT_AUTHOR_NAME`` are not), any case.
- ``value_looks_secret(value)``: URL userinfo with a password, a PEM block, a known token prefix
  (GitHub ``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``, Slack ``xoxa- xoxb- xoxp-``, AWS ``AKIA``/``ASIA``,
  Google ``ya29.``, OpenAI-style ``sk-``, GitLab ``glpat-``, Hugging Face ``hf_``), a JWT (``eyJ...``),
  an Azure connection string's ``AccountKey=`` / ``SharedAccessKey=`` / ``SharedAccessSignature=``
  in any case (the Azure SDK upper-cases the keys it parses),
  a Slack webhook URL, an HTTP ``Bearer`` value.

- ``mask(text)``: all of the above plus ``key=value`` / ``"key": value`` pairs whose key looks
  secret (``client_secret``, ``access_token``, ``X-Goog-Credential``, ``password``...), bearer
  tokens, query strings of URLs (upload ids, signed-URL parameters), PEM bodies.
- ``scrub(texts, values)``: ``texts`` with every occurrence of the secret ``values`` replaced, as
  written or as a string literal spells them (escaped newlines), and the password of a URL alone.

It is a heuristic over names and shapes, on the safe side; it is not a secret scanner. A
credential with an ordinary name and no known shape (``MY_SETTING=hunter2hunter2``) is not
recognised: docs/security.md says what that means for users.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

NAME_RE = re.compile(
    r"KEY|TOKEN(?!IZER)|SECRET|PASSW|CREDENTIAL|(?:^|_)(?:PASS|AUTH)(?:_|$)|_PWD(?:_|$)",
    re.IGNORECASE
)
MASK = "***"
NOT_SAVED = "<credential not saved>"
MIN_SCRUBBED = 8  # shorter values are not scrubbed from text: replacing them would maul the code

_TOKEN = (
    r"(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{10,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|ya29\.[\w.-]{10,}"
    r"|sk-[\w-]{16,}"
    r"|glpat-[\w-]{16,}"
    r"|eyJ[\w-]{8,}\.[\w-]{8,}(?:\.[\w-]*)?"
    r"|hf_[A-Za-z0-9]{30,}"
    r"|(?i:AccountKey|SharedAccessKey|SharedAccessSignature)=[^;\s]{8,}"  # any case, as Azure
    r"|https://hooks\.slack\.com/(?:services|workflows|triggers)/[\w/-]+"
    r"|(?i:bearer)\s+[\w.~+/=-]{8,}"
)
TOKEN_RE = re.compile(rf"(?<![\w-])(?:{_TOKEN})")
PEM_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
URL_PASSWORD_RE = re.compile(r"[A-Za-z][\w+.-]*://[^\s@:/]*:([^\s@]+)@")

_MASKS = (
    # PEM blocks: the body up to its END line, or to the end of the text when cut short
    (re.compile(r"(-----BEGIN ([A-Z0-9 ]+)-----).*?(?:-----END \2-----|\Z)", re.DOTALL),
     rf"\1{MASK}"),
    (re.compile(r"(https?://[^\s?#]+)\?[^\s#'\"]*"), r"\1?..."),  # query strings: upload ids, keys
    (re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"), rf"\1{MASK}"),
    (re.compile(r"(?i)([\w-]*(?:token|key|secret|signature|passw(?:or)?d|credential)"
                r"[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]+"), rf"\1{MASK}"),
    (re.compile(r"://[^\s@'\"]*@"), f"://{MASK}@"),  # userinfo, even holding '/' or ':'
    (TOKEN_RE, MASK),
)


def name_looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    return NAME_RE.search(name) is not None


def value_looks_secret(value: str) -> bool:
    """Whether a value is shaped like a credential, whatever its name."""
    return any(p.search(value) for p in (URL_PASSWORD_RE, PEM_RE, TOKEN_RE))


def env_looks_secret(name: str, value: str) -> bool:
    """An environment variable that must never be written anywhere."""
    return name_looks_secret(name) or value_looks_secret(value)


def mask(text: str) -> str:
    """``text`` with everything that could be a credential replaced by ``***``."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def scrub(texts: Iterable[str], values: Iterable[str]) -> list[str]:
    """``texts`` with each secret value replaced by ``<credential not saved>``: the value, its
    spellings inside a string literal, a URL's password on its own. Values shorter than
    ``MIN_SCRUBBED`` characters are left (see above)."""
    spellings = set()
    for value in values:
        spellings |= {value, repr(value)[1:-1], json.dumps(value)[1:-1]}
        spellings |= {m.group(1) for m in URL_PASSWORD_RE.finditer(value)}
    longest_first = sorted((v for v in spellings if len(v) >= MIN_SCRUBBED), key=len, reverse=True)
    out = []
    for text in texts:
        for secret in longest_first:
            text = text.replace(secret, NOT_SAVED)
        out.append(text)
    return out
