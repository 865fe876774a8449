#!/usr/bin/env bash
# Every rendered object validates against its offline OpenAPI schema (Kubernetes core,
# cert-manager and Prometheus Operator CRDs, from kubernetes-models), without unknown fields.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

need_kubectl
need_node
files=()
for dir in base overlays/gpu overlays/dev overlays/ha; do
  out="$SCRATCH/${dir//\//_}.yaml"
  render "$dir" "$out"
  files+=("$out")
done
node "$TESTS/validate_schemas.js" "$SCRATCH/ts" "${files[@]}" || fail "schema validation"
echo "PASSED: schemas"
