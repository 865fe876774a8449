#!/bin/sh
# monta-node-labels: the planner pod's read-only sidecar. Keeps a `kubectl get nodes -o json`
# NodeList in a file the planner reads (--fabric_node_labels_file), so that the planner,
# which has no Kubernetes client, can place nodes by their topology labels. Runs kubectl
# with the pod's ServiceAccount token (projected into this container only), which may get
# and list nodes and nothing else (deploy/base/planner-rbac.yaml).
#
#   monta-node-labels [OUT]   (default /var/run/monta-node-labels/nodes.json)
#   MONTA_NODE_LABELS_INTERVAL_SECONDS  how often (default 60)
#
# Each refresh writes OUT.tmp and renames it over OUT, so the planner never reads half a
# list; a failed refresh keeps the previous file and says why on stderr.
set -u
out="${1:-/var/run/monta-node-labels/nodes.json}"
interval="${MONTA_NODE_LABELS_INTERVAL_SECONDS:-60}"
case "$interval" in
  '' | *[!0-9]*) echo "monta-node-labels: MONTA_NODE_LABELS_INTERVAL_SECONDS: seconds, got '$interval'" >&2; exit 2 ;;
esac
trap 'exit 0' TERM INT
while :; do
  if kubectl get nodes -o json --request-timeout=60s >"$out.tmp"; then
    mv -f "$out.tmp" "$out"
  else
    echo "monta-node-labels: kubectl get nodes failed; keeping the previous $out" >&2
    rm -f "$out.tmp"
  fi
  sleep "$interval" &
  wait $!
done
