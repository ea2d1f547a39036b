# Server settings of the jupyter-gkeresume image (deploy/Dockerfile copies this file to
# /usr/local/etc/jupyter/, where it is read after docker-stacks' /etc/jupyter/
# jupyter_server_config.py and before z2jh's values mount a jupyter_server_config.json).
#
# Kubeflow Notebooks route /notebook/{namespace}/{name}/ (v1) or
# /workspace/connect/{namespace}/{name}/{port}/ (v2) to the pod without stripping the prefix and
# set it as NB_PREFIX; they authenticate users at the Istio gateway, so Kubeflow's own images
# start `jupyter lab --ServerApp.base_url=$NB_PREFIX --ServerApp.token=''` (kubeflow/notebooks
# notebooks-v1 components/example-notebook-servers/jupyter/s6/services.d/jupyterlab/run). This
# does the same, only when NB_PREFIX is set: elsewhere (JupyterHub, docker run) the server keeps
# base_url `/` or the Hub's prefix, and its token.
import os

c = get_config()  # noqa: F821 (defined by the config loader)

prefix = os.environ.get("NB_PREFIX", "").strip()
if prefix:
    c.ServerApp.base_url = prefix if prefix.endswith("/") else prefix + "/"
    c.IdentityProvider.token = ""  # the gateway authenticated the request
