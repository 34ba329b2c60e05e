pytest_plugins = ["tests.pg_fixture", "tests.cluster_fixture", "tests.models_fixture"]
