"""Secrets never reach the bucket (issue 13.4): credential-looking environment variables set in a
notebook are not saved (by name or by value), their values are scrubbed from the stored input
history, and error messages mask every credential shape."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from jupyter_gkeresume.credentials import env_looks_secret, mask, scrub
from jupyter_gkeresume.snapshot.store import SnapshotStore, describe

GITHUB = "ghp_" + "A1b2" * 9
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl"
AZURE = ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=QUJDREVGR0hJSktMTU5PUA==;"
         "EndpointSuffix=core.windows.net")
SLACK_HOOK = "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/abcdefghijklmnopqrstuvwx"
PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nbm90IGEgcmVhbCBrZXk=\n"
       "-----END PRIVATE KEY-----\n")


@pytest.mark.parametrize(("name", "value"), [
    ("GKERESUME_SIGNING_KEY", "short"), ("my_api_token", "x"), ("DB_PASSWORD", "x"),
    ("PASSWD", "x"), ("CLIENT_SECRET", "x"), ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
    ("DATABASE_URL", "postgresql://app:hunter2@db/x"), ("UPSTREAM", "https://u:p/ss@h/x"),
    ("GH", GITHUB), ("GHO", "gho_" + "z" * 36), ("FINE", "github_pat_" + "Q" * 40),
    ("SLACK", "xoxb-1234567890-abcdefghij"), ("AWS_ID", "AKIAABCDEFGHIJKLMNOP"),
    ("GCP", "ya29.a0AfH6SMBabcdefghij"), ("OPENAI", "sk-" + "s" * 40),
    ("GITLAB", "glpat-" + "g" * 20), ("SESSION", JWT), ("CERT_PEM", PEM),
    # issue 22.10: names and values the filter let through
    ("DB_PASS", "x"), ("MYSQL_PWD", "x"), ("REDIS_AUTH", "x"), ("PGPASSFILE_PASS", "x"),
    ("STORAGE", AZURE), ("MODEL_HUB", "hf_" + "h" * 34), ("ALERTS", SLACK_HOOK),
    ("UPSTREAM_HEADER", "Bearer abcdef0123456789"), ("HF_TOKEN", "x"), ("TOKENIZER_TOKEN", "x"),
])
def test_credentials_are_recognized(name, value):
    assert env_looks_secret(name, value)


@pytest.mark.parametrize(("name", "value"), [
    ("MY_SETTING", "on"), ("PATH", "/usr/bin:/bin"), ("HOME", "/home/jovyan"),
    ("SITE", "https://example.org/path"), ("TASK", "task-runner-1"), ("EMAIL", "a@b.org"),
    ("SERVICE", "http://user@host/x"),
    # the shapes added for 22.10 must not swallow ordinary settings
    ("PWD", "/home/jovyan"), ("OLDPWD", "/tmp"), ("GIT_AUTHOR_NAME", "Ada"), ("PASSES", "3"),
    ("BYPASS_CACHE", "1"), ("HF_HOME", "/home/jovyan/.cache/huggingface"),
    ("WEBSITE", "https://hooks.example.org/services/x"), ("GREETING", "bearer of good news"),
    # issue 28: Hugging Face's tokenizers setting (set in many of its notebooks) is no token
    ("TOKENIZERS_PARALLELISM", "false"),
])
def test_settings_are_not_taken_for_credentials(name, value):
    assert not env_looks_secret(name, value)


def test_masking_covers_every_credential_shape():
    text = (
        '{"client_secret": "CS-1234567", "refresh_token": "RT-1234567"} '
        "X-Goog-Credential=GOOGCRED-1234%2F20261201 "
        "Authorization: Bearer BEARER-1234567 bearer BARE-1234567 "
        "gs://user:pa/ss-WORD@bucket/x https://user/x:y-WORD2@host/p "
        f"{GITHUB} {JWT} password=PW-1234567 {AZURE} {SLACK_HOOK} hf_{'h' * 34} {PEM}"
        "-----BEGIN RSA PRIVATE KEY-----\nCUT-SHORT-BODY"
    )
    masked = mask(text)
    for secret in ("CS-1234567", "RT-1234567", "GOOGCRED", "BEARER-1234567", "BARE-1234567",
                   "ss-WORD", "y-WORD2", GITHUB, JWT, "PW-1234567", "MIIEvQIBADAN", "bm90IGEg",
                   "CUT-SHORT-BODY", "QUJDREVGR0hJSktMTU5PUA", "abcdefghijklmnopqrstuvwx",
                   "h" * 34):
        assert secret not in masked, secret
    assert "gs://***@bucket/x" in masked and "-----BEGIN PRIVATE KEY-----***" in masked


def test_store_errors_mask_userinfo_holding_a_slash(tmp_path):
    exc = OSError("open gs://svc:pa/ss-SECRET5@bucket/x failed: client_secret=SECRET6")
    text = describe(exc)
    assert "SECRET5" not in text and "SECRET6" not in text
    store_text = repr(SnapshotStore(str(tmp_path), "ws"))
    assert "SnapshotStore" in store_text
    from jupyter_gkeresume.snapshot.store import _safe_url

    assert "SECRET7" not in _safe_url("gs://svc:pa/ss-SECRET7@bucket/x")


def test_scrub_replaces_long_values_only():
    assert scrub(["k = 'abcdefgh12'; n = 'on'"], ["abcdefgh12", "on"]) == [
        "k = '<credential not saved>'; n = 'on'"]


def every_stored_byte(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_credentials_set_in_a_notebook_never_reach_the_store(start_kernel, kernel_env):
    """A real kernel: the signing key, a URL with a password, a GitHub token and a PEM set in
    cells; after a checkpoint, no stored byte holds any of them, and the report says so."""
    key = "notebook-key-" + secrets.token_hex(16)
    password = "Pw-" + secrets.token_hex(12)
    url = f"postgresql://app:{password}@db.internal:5432/prod"
    token = "ghp_" + secrets.token_hex(18)
    pem_body = secrets.token_hex(24)
    pem = f"-----BEGIN PRIVATE KEY-----\\n{pem_body}\\n-----END PRIVATE KEY-----\\n"
    k = start_kernel()
    k.run(f"import os\nos.environ['GKERESUME_SIGNING_KEY'] = {key!r}\n"
          f"os.environ['DATABASE_URL'] = {url!r}\nos.environ['MY_SETTING'] = 'kept'")
    k.run(f"os.environ['GH'] = {token!r}\nos.environ['CERT'] = '{pem}'\nx = 41 + 1")
    out = k.run("%checkpoint")
    for name in ("GKERESUME_SIGNING_KEY", "DATABASE_URL", "GH", "CERT"):
        assert f"not saved: ${name} [environment variable]: looks like a credential" in out, out
    stored = every_stored_byte(Path(kernel_env["GKERESUME_STORE"]))
    assert b"kept" in stored  # the session's other changes are saved
    for secret in (key, password, url, token, pem_body):
        assert secret.encode() not in stored, secret
    restored = start_kernel()  # the snapshot was signed with the key the notebook set
    restored.run(f"import os\nos.environ['GKERESUME_SIGNING_KEY'] = {key!r}")
    restored.run("%resume")
    state = restored.run_json("import json, os\nprint(json.dumps([x, os.environ.get('MY_SETTING'),"
                              " os.environ.get('DATABASE_URL'), In[1]]))")
    assert state[:3] == [42, "kept", None]
    assert "<credential not saved>" in state[3] and key not in state[3]
