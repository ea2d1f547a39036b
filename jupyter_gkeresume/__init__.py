"""jupyter-gkeresume: pause a GPU notebook, give the accelerator back, resume it later.

This package is the server side and everything the server and the CLI share; it never imports
torch. The kernel side lives in ``kernel_hooks``.
"""

__version__ = "0.1.0"
