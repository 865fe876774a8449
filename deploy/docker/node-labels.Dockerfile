# monta-node-labels image: the planner pod's read-only sidecar (deploy/docker/node-labels.sh)
# that keeps `kubectl get nodes -o json` in a file for --fabric_node_labels_file. Build from
# the repository root (BuildKit reads deploy/docker/node-labels.Dockerfile.dockerignore):
#   docker build -f deploy/docker/node-labels.Dockerfile -t monta/monta-node-labels:0.1.0 .
#
# kubectl comes from the Kubernetes project's own image (a static binary; pick the minor
# version of your API server, kubectl supports one minor version of skew either way),
# the shell and coreutils from debian:12-slim.
FROM registry.k8s.io/kubectl:v1.32.0 AS kubectl

FROM debian:12-slim
COPY --from=kubectl /bin/kubectl /usr/local/bin/kubectl
COPY deploy/docker/node-labels.sh /usr/local/bin/monta-node-labels
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/monta-node-labels"]
