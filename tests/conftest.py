pytest_plugins = ["fixtures_lifecycle"]
