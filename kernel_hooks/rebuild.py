"""Reconstructors named in the graph pickle for storages that left it as blobs.

The capture reduces each torch storage to ``storage(key, dtype)`` (``untyped(key)`` for a bare
UntypedStorage), each large numpy array to ``array(key, ...)`` and each ``__cuda_array_interface__``
object to ``cuda_array(key, record)``. While a graph is read, the
restore code installs its loader with ``loading(loader)``; these functions ask it for the bytes.
Pickle's memo makes each reduced object come back once, so aliases stay aliases.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Loader(Protocol):
    def torch_storage(self, key: str) -> Any: ...

    def numpy_buffer(self, key: str) -> Any: ...

    def cuda_array(self, key: str, record: dict[str, Any]) -> Any: ...


_loader: Loader | None = None


@contextmanager
def loading(loader: Loader) -> Iterator[None]:
    """Serve the reconstructors from ``loader`` while a graph is unpickled."""
    global _loader
    previous, _loader = _loader, loader
    try:
        yield
    finally:
        _loader = previous


def _current() -> Loader:
    if _loader is None:
        raise RuntimeError("a gkeresume graph can only be unpickled by kernel_hooks.resume")
    return _loader


def storage(key: str, dtype: str) -> Any:
    import torch

    return torch.storage.TypedStorage(
        wrap_storage=_current().torch_storage(key), dtype=getattr(torch, dtype), _internal=True
    )


def untyped(key: str) -> Any:
    return _current().torch_storage(key)


def array(key: str, dtype: Any, shape: tuple, strides: tuple, offset: int, writeable: bool) -> Any:
    import numpy

    result = numpy.ndarray(shape, dtype, buffer=_current().numpy_buffer(key), offset=offset,
                           strides=strides)
    result.flags.writeable = writeable
    return result


def cuda_array(key: str, record: dict[str, Any]) -> Any:
    return _current().cuda_array(key, record)
