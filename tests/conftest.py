import pytest

pytest_plugins = [
    "fixtures_kernels",
    "fixtures_gcs",
    "fixtures_lifecycle",
    "fixtures_gpu",
    "fixtures_fakecuda",
    "fixtures_server",
    "fixtures_ui",
]


@pytest.fixture(autouse=True)
def _private_jupyter_data_dir(tmp_path, monkeypatch):
    """Each test (and the kernels and servers it starts, which inherit the environment) has
    its own Jupyter data dir: what the product keeps there (the default key file, the ids of a
    workspace's keys) never leaks between tests nor into the real home."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
