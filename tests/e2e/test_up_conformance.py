"""OpenAI's published API description against ``llmgw up`` serving the starter through llama.cpp.

Schemathesis generates requests from OpenAI's description (``tests/fixtures/openai/``)
(valid ones and broken ones), sends them to the gateway, and checks that no
answer is a 5xx (a gateway's 5xx means the gateway or the engine failed,
never that the client sent something wrong) and that every answer the
description documents (the 200s) validates against its schema. The hooks
(``conformance_hooks.py``) point ``model`` at the starter and keep answers
short; the run is deterministic and bounded in examples and time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# OpenAI's description, the part llmgw serves (scripts/openai_spec.py writes it).
DESCRIPTION = Path(__file__).resolve().parents[1] / "fixtures/openai/openapi.json"
# The operations llmgw serves in OpenAI's shape. (Stored responses, GET and
# DELETE /responses/{id}, answer 400 for the starter's project, which keeps
# none: tests/e2e/test_up_responses.py covers them.)
OPERATIONS = (
    r"^(POST /(chat/completions|completions|embeddings|responses)|GET /models(/\{model\})?)$"
)
# Per operation: enough for every phase (examples, coverage, fuzzing, stateful)
# to reach the engine, few enough to finish in well under two minutes on two cores.
MAX_EXAMPLES = 10
MAX_TIME_S = 80


# The run, and the starter's start when this test is the first to ask for it.
@pytest.mark.timeout(MAX_TIME_S + 360)
def test_the_gateway_answers_as_openais_description_says(starter_gateway, tmp_path):
    starter = starter_gateway
    st = Path(sys.executable).with_name("st")
    env = {
        **os.environ,
        "LLMGW_CONFORMANCE_MODEL": starter.model,
        "SCHEMATHESIS_HOOKS": "conformance_hooks",
        "PYTHONPATH": str(Path(__file__).parent),
    }
    res = subprocess.run(
        [
            str(st),
            "run",
            str(DESCRIPTION),
            "--url",
            starter.base_url,
            "-H",
            f"Authorization: Bearer {starter.key}",
            "--include-name-regex",
            OPERATIONS,
            "--checks",
            "not_a_server_error,response_schema_conformance",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--max-time",
            str(MAX_TIME_S),
            # An answer on two busy CPU cores may take longer than schemathesis's 10 s.
            "--request-timeout",
            "60",
            "--generation-deterministic",
            "--no-shrink",
            "--workers",
            "1",
            "--no-color",
            "--report-dir",
            str(tmp_path / "report"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=MAX_TIME_S + 120,
        cwd=tmp_path,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-20000:]
    # Every operation was reached: a run that tested nothing would pass too.
    assert "Tested: 6" in out, out[-5000:]
