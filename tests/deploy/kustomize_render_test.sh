#!/usr/bin/env bash
# The kustomize base and the overlays render with Debian's kubectl 1.20 (kustomize v2),
# and each rendering holds the objects Monta needs.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

need_kubectl
echo "kubectl: $KUBECTL ($("$KUBECTL" version --client --short 2>/dev/null || true))"
# No ClusterRole: the planner has no Kubernetes client (deploy/base/planner-rbac.yaml).
want="DaemonSet Deployment Issuer Certificate MutatingWebhookConfiguration Namespace NetworkPolicy PodDisruptionBudget PodMonitor PrometheusRule Service ServiceAccount ServiceMonitor ValidatingWebhookConfiguration"
for dir in base overlays/gpu overlays/dev overlays/ha; do
  out="$SCRATCH/${dir//\//_}.yaml"
  render "$dir" "$out"
  kinds="$(sed -n 's/^kind: //p' "$out" | sort -u | tr '\n' ' ')"
  more=""
  [[ $dir == overlays/ha ]] && more="StatefulSet"  # etcd's three members
  for k in $want $more; do
    grep -qx "kind: $k" "$out" || fail "deploy/$dir: no $k (rendered kinds: $kinds)"
  done
  echo "deploy/$dir: $(grep -c '^kind:' "$out") objects: $kinds"
done
echo "PASSED: base and overlays render"
