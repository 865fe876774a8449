# monta-agent image. Build from the repository root (BuildKit reads
# deploy/docker/agent.Dockerfile.dockerignore):
#   docker build -f deploy/docker/agent.Dockerfile -t monta/monta-agent:0.1.0 .
#
# Stage 1 builds with the repository's own toolchain: scripts/setup.sh installs the Debian
# 12 packages Monta builds with, and Bazel builds offline exactly as on a developer machine.
# Without /usr/local/cuda in the build stage the NCCL communicator is not built (see
# third_party/cuda_configure.bzl): this image benchmarks with Gloo over TCP. A GPU build
# needs the CUDA toolkit and NCCL in the build stage and NCCL/cudart at run time; the
# driver libraries come from the NVIDIA container runtime (deploy/overlays/gpu).
FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
# MONTA_SETUP_EXTRAS=0: no test-only extras (Prometheus server, kubectl, Node packages).
RUN MONTA_SETUP_EXTRAS=0 ./scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bazel build -c opt //agent:monta-agent \
 && install -D -m 0755 bazel-bin/agent/monta-agent /out/monta-agent

# Stage 2: a slim Debian 12 with only the shared libraries the agent links (their own
# dependencies, e.g. libssl3, libre2-9, libc-ares2, libcivetweb1, come with them).
FROM debian:12-slim
ARG RUNTIME_PACKAGES="libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libgloo0 libyaml-cpp0.7"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $RUNTIME_PACKAGES \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 monta \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin monta
COPY --from=build /out/monta-agent /usr/local/bin/monta-agent
# Fail the build if a linked library is missing from RUNTIME_PACKAGES.
RUN ! ldd /usr/local/bin/monta-agent | grep "not found"
# Non-root by default; the GPU overlay runs it as UID 0 with only CAP_IPC_LOCK (RDMA
# memory registration), see deploy/overlays/gpu/agent-gpu.yaml.
USER 65532:65532
# Prometheus /metrics (with hostNetwork: on the node's address)
EXPOSE 7402
ENTRYPOINT ["/usr/local/bin/monta-agent"]
