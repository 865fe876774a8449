#!/usr/bin/env bash
# The rendered manifests keep Monta's deployment contract: webhook conventions, references
# between objects, least-privilege RBAC, the agent's identity and host access, GPU overlay.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

need_kubectl
need_node
for v in base gpu dev ha; do
  dir="overlays/$v"; [[ $v == base ]] && dir=base
  out="$SCRATCH/$v.yaml"
  render "$dir" "$out"
  node "$TESTS/check_policy.js" "$v" "$out" || fail "policy checks of deploy/$dir"
done
echo "PASSED: policy"
