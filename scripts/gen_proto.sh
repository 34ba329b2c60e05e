#!/usr/bin/env bash
# Regenerates the betterproto2 code from proto/llmgw/v1/*.proto.
#   scripts/gen_proto.sh            writes into proto/
#   scripts/gen_proto.sh OUT_DIR    writes into OUT_DIR (CI diffs it against proto/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/proto}
py=${PYTHON:-$root/.venv/bin/python}
bindir=$(dirname "$py")
mkdir -p "$out"
# protoc finds the plugin, and the plugin finds ruff, on PATH.
PATH="$bindir:$PATH" "$py" -m grpc_tools.protoc -I "$root/proto" \
  --python_betterproto2_out="$out" \
  --python_betterproto2_opt=client_generation=async,server_generation=async \
  "$root"/proto/llmgw/v1/*.proto
