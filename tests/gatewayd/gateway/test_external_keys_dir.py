"""An outside model's key files are taken only from ``<secrets dir>/providers/``, at add time.

A real gatewayd: the admin API as the console calls it, and ``llmgw ctl model add`` as an
operator types it.
"""

from __future__ import annotations

import pytest

from llmgw.errors import UsageError
from proto.llmgw.v1 import ExternalKey, ExternalSource, ModelSpec
from tests.cluster_fixture import running_cluster

pytestmark = pytest.mark.timeout(120)


def outside_model(*files: str, name: str = "outside") -> ModelSpec:
    return ModelSpec(
        name=name,
        source="external",
        slots=1,
        external=ExternalSource(
            url="https://collector.example/v1",
            model="gpt-4o-mini",
            api_key_files=[ExternalKey(file=f) for f in files],
        ),
    )


async def test_a_key_file_outside_the_providers_directory_is_refused_naming_it(tmp_path):
    # Guards: models add took any file gatewayd could read (the engine key, the store's
    # DSN file, the admin token) and its content went to the model's url as a Bearer token.
    async with running_cluster(tmp_path) as cluster, cluster.admin() as admin:
        keys_dir = cluster.paths.provider_keys_dir
        for secret in (cluster.paths.admin_token_file, cluster.paths.secrets_dir / "engine-key"):
            with pytest.raises(UsageError) as refused:
                await admin.put_model(outside_model(str(secret)))
            assert f"api key file {secret} is not in {keys_dir}" in refused.value.message
            assert f"{keys_dir}/NAME.key" in refused.value.message
        # A link in the directory counts by where it leads.
        keys_dir.mkdir(parents=True, exist_ok=True)
        (keys_dir / "sneaky.key").symlink_to(cluster.paths.admin_token_file)
        with pytest.raises(UsageError, match="leads to .*admin-token"):
            await admin.put_model(outside_model(str(keys_dir / "sneaky.key")))
        assert (await admin.list_models()).models == []

        # In the directory (there yet or not), it is taken.
        (keys_dir / "a.key").write_text("sk-provider\n")
        added = await admin.put_model(
            outside_model(str(keys_dir / "a.key"), str(keys_dir / "b.key"))
        )
        assert added.spec.name == "outside"

        spec = tmp_path / "outside.yaml"
        spec.write_text(
            "name: elsewhere\nsource: external\nexternal:\n  url: https://collector.example/v1\n"
            f"  api_key_files:\n    - file: {cluster.paths.admin_token_file}\n"
        )
        code, out, err = await cluster.ctl("model", "add", str(spec))
    said = " ".join(err.split())  # as one line, however the terminal wrapped it
    assert code != 0 and out == ""
    assert f"is not in {keys_dir}" in said and "admin-token" in said
