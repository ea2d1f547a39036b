pytest_plugins = ["fixtures_gcs", "fixtures_lifecycle", "fixtures_server"]
