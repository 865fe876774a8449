#!/usr/bin/env bash
# Runs a Python test script under Debian's interpreter (/usr/bin/python3, where
# python3-torch and python3-grpcio live) from the test's runfiles root. The gRPC stubs are
# generated at test time from the runfiles' proto/monta/v1 into the test's temp dir.
set -euo pipefail
cd "${TEST_SRCDIR:-$(dirname "$0")/../..}/${TEST_WORKSPACE:-}"
export MONTA_PROTO_ROOT="$PWD"
export MONTA_STUBS_DIR="${TEST_TMPDIR:-$(mktemp -d)}/monta-stubs"
export PYTHONDONTWRITEBYTECODE=1
export GLOO_SOCKET_IFNAME=lo
export OMP_NUM_THREADS=1
if ! /usr/bin/python3 -c 'import torch, grpc' 2>/dev/null; then
  echo "run_py.sh: /usr/bin/python3 lacks torch or grpc: run ./scripts/setup.sh" >&2
  exit 1
fi
exec /usr/bin/python3 "$@"
