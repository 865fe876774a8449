#!/usr/bin/env bash
# Per-node agent certificates from the monta CA (deploy/base/grpc-pki.yaml), with
# cert-manager:
#
#   deploy/agent-certificates.sh render [NODE...] | kubectl apply -f -
#       one cert-manager Certificate per node (default: every node labelled
#       monta.io/agent=true): URI SAN spiffe://monta/node/NODE, client auth, issued into
#       the Secret monta-system/monta-agent-NODE and renewed by cert-manager.
#   deploy/agent-certificates.sh export NODE DIR
#       writes DIR/ca.crt, DIR/tls.crt, DIR/tls.key from that Secret (0440), for your node
#       provisioning to place in /etc/monta/agent-tls on NODE (the agent's hostPath).
#
# Re-export after each renewal (cert-manager renews 15 days before expiry; watch the
# Secret's resourceVersion or run this daily); the agent re-reads the files every
# --tls_refresh_seconds, no restart. Why files on the node and not a Secret volume: see
# the tls volume in deploy/base/agent-daemonset.yaml.
set -euo pipefail

NS=monta-system
die() { echo "agent-certificates.sh: $*" >&2; exit 2; }

render() {
  local nodes=("$@")
  if [[ ${#nodes[@]} -eq 0 ]]; then
    mapfile -t nodes < <(kubectl get nodes -l monta.io/agent=true -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  fi
  [[ ${#nodes[@]} -gt 0 ]] || die "no nodes given and none labelled monta.io/agent=true"
  local node
  for node in "${nodes[@]}"; do
    [[ "$node" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] || die "not a node name: $node"
    cat <<YAML
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: monta-agent-$node
  namespace: $NS
  labels:
    app.kubernetes.io/name: monta-agent
    app.kubernetes.io/part-of: monta
spec:
  secretName: monta-agent-$node
  duration: 720h     # 30 days
  renewBefore: 360h  # 15 days
  commonName: monta-agent-$node
  uris:
  - spiffe://monta/node/$node
  privateKey:
    algorithm: ECDSA
    size: 256
    rotationPolicy: Always
  usages:
  - client auth
  - digital signature
  issuerRef:
    kind: Issuer
    name: monta-ca
YAML
  done
}

export_files() {
  local node=$1 dir=$2 key
  mkdir -p "$dir"
  for key in ca.crt tls.crt tls.key; do
    kubectl -n "$NS" get secret "monta-agent-$node" -o "jsonpath={.data.${key//./\\.}}" |
      base64 -d >"$dir/$key.new"
    [[ -s "$dir/$key.new" ]] || die "secret $NS/monta-agent-$node has no $key (issued yet?)"
    chmod 0440 "$dir/$key.new"
  done
  # Replace the pair together (the agent may read between two renames; it retries).
  for key in ca.crt tls.crt tls.key; do mv -f "$dir/$key.new" "$dir/$key"; done
}

case "${1:-}" in
  render) shift; render "$@" ;;
  export) [[ $# -eq 3 ]] || die "usage: export NODE DIR"; export_files "$2" "$3" ;;
  *) die "usage: deploy/agent-certificates.sh render [NODE...] | export NODE DIR" ;;
esac
