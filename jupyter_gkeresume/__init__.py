"""jupyter-gkeresume: pause a GPU notebook, give the accelerator back, resume it later.

This package is the server side and everything the server and the CLI share; it never imports
torch. The kernel side lives in ``kernel_hooks``.
"""

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where JupyterLab finds the prebuilt lab extension (built by `pip install`)."""
    return [{"src": "labextension", "dest": "jupyter-gkeresume"}]


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    """The jupyter_server extension (enabled on install by jupyter-config/server-config)."""
    from .app import GkeResumeApp

    return [{"module": "jupyter_gkeresume", "app": GkeResumeApp}]
