pytest_plugins = [
    "fixtures_kernels",
    "fixtures_gcs",
    "fixtures_lifecycle",
    "fixtures_gpu",
    "fixtures_fakecuda",
    "fixtures_server",
    "fixtures_ui",
]
