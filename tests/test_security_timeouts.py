"""Release backends never wait forever (issue 13.9): a Hub that accepts and never answers is a
clear ReleaseError after the configured timeout (the Kubeflow case is in test_kubeflow_release)."""

from __future__ import annotations

import asyncio

import pytest
from test_kubeflow_release import black_hole  # noqa: F401 - the fixture

from jupyter_gkeresume.errors import ReleaseError
from jupyter_gkeresume.release import JupyterHubRelease


def test_a_black_holed_hub_is_a_clear_error(black_hole, monkeypatch):  # noqa: F811
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "server-token")
    release = JupyterHubRelease(api_url=f"{black_hole}/hub/api", user="alice", request_timeout=0.5)

    async def bounded():  # a safety net so that a regression fails instead of hanging the suite
        return await asyncio.wait_for(release.release(), 120)

    with pytest.raises(ReleaseError, match=r"did not answer within 0\.5 s.*request_timeout"):
        asyncio.run(bounded())
