"""Stand-in for ``gcloud`` and ``kubectl`` (``main(tool, args)``) for the admin
scripts of deploy/gcs: it logs each call's arguments (one JSON list a line, ``$FAKE_CLOUD_LOG``)
and keeps what the calls create in ``$FAKE_CLOUD_STATE`` (JSON), answering as the real tools do
for the few commands the scripts use: exit status 1 and a message on stderr for what does not
exist, "already exists" for a second create.

    gcloud projects describe P --format=value(projectNumber)         -> 123456
    gcloud storage managed-folders create|add-iam-policy-binding|get-iam-policy FOLDER ...
    kubectl apply -f -    (a JSON object on stdin)
    kubectl -n NS get serviceaccount NAME -o json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(tool: str, args: list[str]) -> int:
    with open(os.environ["FAKE_CLOUD_LOG"], "a") as log:
        log.write(json.dumps([tool, *args]) + "\n")
    path = Path(os.environ["FAKE_CLOUD_STATE"])
    state = json.loads(path.read_text()) if path.exists() else {"folders": {}, "accounts": {}}
    code = (gcloud if tool == "gcloud" else kubectl)(args, state)
    path.write_text(json.dumps(state))
    return code


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def gcloud(args: list[str], state: dict) -> int:
    if args[:2] == ["projects", "describe"]:
        print("123456")
        return 0
    assert args[:2] == ["storage", "managed-folders"], args
    action, folder = args[2], args[3]
    folders = state["folders"]
    if action == "create":
        if folder in folders:
            return fail(f"ERROR: HTTPError 409: The managed folder {folder} already exists.")
        folders[folder] = []
        return 0
    if folder not in folders:
        return fail(f"ERROR: HTTPError 404: The managed folder {folder} was not found.")
    if action == "add-iam-policy-binding":
        binding = [flags(args)["role"], flags(args)["member"]]
        if binding not in folders[folder]:
            folders[folder].append(binding)
        return 0
    assert action == "get-iam-policy", args
    roles: dict[str, list[str]] = {}
    for role, member in folders[folder]:
        roles.setdefault(role, []).append(member)
    print(json.dumps({"bindings": [{"role": r, "members": m} for r, m in roles.items()]}))
    return 0


def kubectl(args: list[str], state: dict) -> int:
    if args == ["apply", "-f", "-"]:
        obj = json.loads(sys.stdin.read())
        meta = obj["metadata"]
        state["accounts"][f"{meta['namespace']}/{meta['name']}"] = obj
        return 0
    assert args[0] == "-n" and args[2:4] == ["get", "serviceaccount"], args
    key = f"{args[1]}/{args[4]}"
    if key not in state["accounts"]:
        return fail(f'Error from server (NotFound): serviceaccounts "{args[4]}" not found')
    print(json.dumps(state["accounts"][key]))
    return 0


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 1
