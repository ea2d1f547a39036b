"""Session state beside the objects: RNG states, cwd, sys.path changes, env changes, counts,
``sys.argv`` when the session set it, and the string hash seed the kernel started with.

``remember_baseline()`` runs when the extension loads (at kernel start when auto-loaded): changes
to ``sys.path``, ``sys.argv`` and ``os.environ`` after it are "made in the session" and travel
with snapshots. ``sys.argv`` travels only then: a notebook sets it to run a script's
``argparse`` code (``sys.argv = ["train.py", "--lr", "0.1"]``); the kernel's own names its
connection file, which the resumed kernel's names instead.
Environment variables that look like credentials (by name or value, ``jupyter_gkeresume.
credentials``) are never saved; they are reported. ``without_credentials(history)`` is the input
history a snapshot may keep: the values of such variables scrubbed from it.
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

_baseline: dict[str, Any] = {}


def remember_baseline() -> None:
    """Record sys.path, sys.argv and the environment as they are now (idempotent)."""
    if not _baseline:
        _baseline["sys_path"] = list(sys.path)
        _baseline["argv"] = list(sys.argv)
        _baseline["env"] = dict(os.environ)


def hash_seed() -> str | None:
    """This kernel's ``PYTHONHASHSEED`` as it started (None: random, not reproducible)."""
    remember_baseline()
    seed = _baseline["env"].get("PYTHONHASHSEED", "")
    return seed if seed.isdigit() else None


def rng_states() -> dict[str, Any]:
    """RNG states of random, numpy's global generator, torch CPU and initialized CUDA devices.
    numpy's generator only once ``numpy.random`` is imported: before, it does not exist (the
    import seeds it from the OS, in the resumed kernel as it would have here), and importing it
    for nothing costs a checkpoint 6 ms."""
    states: dict[str, Any] = {"random": random.getstate()}
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:  # as a dict that names its bit generator (set_bit_generator)
        states["numpy"] = numpy_random.get_state(legacy=False)
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_initialized():
            states["torch_cuda"] = torch.cuda.get_rng_state_all()
    return states


def capture(execution_count: int) -> tuple[dict[str, Any], list[str]]:
    """The session state to pickle, and the env names left out because they look like
    credentials."""
    from jupyter_gkeresume import credentials  # its patterns compile at checkpoint, not at load

    remember_baseline()
    env_before = _baseline["env"]
    env_set, skipped = {}, []
    for name, value in os.environ.items():
        if env_before.get(name) != value:
            if credentials.env_looks_secret(name, value):
                skipped.append(name)
            else:
                env_set[name] = value
    state = {
        "rng": rng_states(),
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
        "sys_path_added": [p for p in sys.path if p not in _baseline["sys_path"]],
        "sys_path_removed": [p for p in _baseline["sys_path"] if p not in sys.path],
        "env_set": env_set,
        "env_unset": [n for n in env_before if n not in os.environ],
        "argv": list(sys.argv) if sys.argv != _baseline["argv"] else None,
        "execution_count": execution_count,
        "hash_seed": hash_seed(),
        "torch_hook_id": getattr(_removable_handle(), "next_id", None),
    }
    return state, skipped


def _removable_handle() -> Any:
    return getattr(sys.modules.get("torch.utils.hooks"), "RemovableHandle", None)


def continue_hook_ids(state: dict[str, Any]) -> None:
    """torch numbers every hook it registers from one counter (``RemovableHandle.next_id``,
    torch/utils/hooks.py) and keys each module's and tensor's hook dict by that number. A fresh
    process counts from 0, so the first hook registered after a resume took the number of a
    restored one and replaced it in its dict (the pruning tutorial cut after its first pruning:
    pruning the bias replaced the weight's pruning hook, silently). The counter goes on from
    where the session left it. Applied whatever the resume restores (``--only`` too)."""
    counted = state.get("torch_hook_id")
    if counted:
        import torch.utils.hooks

        handle = torch.utils.hooks.RemovableHandle
        handle.next_id = max(handle.next_id, counted)


def without_credentials(history: list[str]) -> list[str]:
    """``history`` with the value of every credential-looking environment variable (set now, or
    when the session started) scrubbed out."""
    from jupyter_gkeresume import credentials

    remember_baseline()
    env = {**_baseline["env"], **os.environ}
    return credentials.scrub(history, [v for n, v in env.items() if credentials.env_looks_secret(n, v)])


def _sys_path(state: dict[str, Any], here: list[str]) -> list[str]:
    """``here`` (this kernel's ``sys.path``) with the session's changes made again: what it
    removed taken out, what it added put where it stood, after the nearest entry before it
    that is here too (first, when none is): Python imports the first copy of a module on the
    path, so ``sys.path.insert(0, "src")`` must stay first. A snapshot from before the saved
    order (no ``sys_path``) had its additions appended."""
    removed = set(state.get("sys_path_removed", []))
    added = [p for p in state.get("sys_path_added", []) if p not in removed]
    path = [p for p in here if p not in removed and p not in added]
    saved = state.get("sys_path") or [*path, *added]
    for entry in sorted(added, key=saved.index):
        before = saved[:saved.index(entry)]
        anchor = next((p for p in reversed(before) if p in path), None)
        path.insert(0 if anchor is None else path.index(anchor) + 1, entry)
    return path


def _set_numpy_state(saved: dict[str, Any] | tuple) -> None:
    """numpy's global generator to ``saved``, over the bit generator it names: a session may
    have put another under it (``np.random.set_bit_generator(PCG64(1))``), whose state
    ``set_state`` refuses on a fresh kernel's MT19937 (the resume failed). Older snapshots hold
    the legacy tuple, an MT19937's."""
    import numpy

    name = saved.get("bit_generator") if isinstance(saved, dict) else "MT19937"
    if type(numpy.random.get_bit_generator()).__name__ != name:
        numpy.random.set_bit_generator(getattr(numpy.random, name)())
    numpy.random.set_state(saved)


def restore(state: dict[str, Any], warnings: list[str]) -> None:
    """Apply a captured session state here; what cannot be applied becomes a warning."""
    rng = state.get("rng", {})
    if "random" in rng:
        random.setstate(rng["random"])
    if "numpy" in rng:
        _set_numpy_state(rng["numpy"])
    if "torch" in rng:
        import torch

        torch.set_rng_state(rng["torch"])
        cuda_states = rng.get("torch_cuda") or []
        if cuda_states and torch.cuda.is_available():
            count = min(len(cuda_states), torch.cuda.device_count())
            for index in range(count):
                torch.cuda.set_rng_state(cuda_states[index], index)
            if count < len(cuda_states):
                warnings.append(f"CUDA RNG restored for {count} of {len(cuda_states)} devices")
        elif cuda_states:
            warnings.append("no GPU here: CUDA RNG states were not restored")
    cwd = state.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as exc:
            warnings.append(f"working directory {cwd} not restored: {exc.strerror}")
    sys.path[:] = _sys_path(state, sys.path)
    if state.get("argv") is not None:
        sys.argv = list(state["argv"])
    os.environ.update(state.get("env_set", {}))
    for name in state.get("env_unset", []):
        os.environ.pop(name, None)
    if "TZ" in state.get("env_set", {}) or "TZ" in state.get("env_unset", []):
        time.tzset()  # the C library reads TZ when told to: time.localtime() follows it again
    seed = state.get("hash_seed")
    if seed is not None and seed != hash_seed():
        warnings.append(f"string hash seed: this kernel's is {hash_seed() or 'random'}, the "
                        f"snapshot's {seed}: sets of strings iterate in another order (a "
                        "resume from the lab into a notebook without a running kernel starts "
                        "one with the snapshot's seed)")
