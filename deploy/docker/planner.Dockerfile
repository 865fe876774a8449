# monta-planner image. Build from the repository root (BuildKit reads
# deploy/docker/planner.Dockerfile.dockerignore):
#   docker build -f deploy/docker/planner.Dockerfile -t monta/monta-planner:0.1.0 .
#
# Stage 1 builds with the repository's own toolchain: scripts/setup.sh installs the Debian
# 12 packages Monta builds with (Bazel 4.2.3 from bazel-bootstrap, gRPC, protobuf, Abseil,
# ...), and Bazel builds offline exactly as on a developer machine.
FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
# MONTA_SETUP_EXTRAS=0: no test-only extras (Prometheus server, kubectl, Node packages).
RUN MONTA_SETUP_EXTRAS=0 ./scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bazel build -c opt //server:monta-planner \
 && install -D -m 0755 bazel-bin/server/monta-planner /out/monta-planner

# Stage 2: a slim Debian 12 with only the shared libraries the planner links (their own
# dependencies, e.g. libssl3, libre2-9, libc-ares2, libcivetweb1, come with them).
FROM debian:12-slim
ARG RUNTIME_PACKAGES="libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libsqlite3-0 libyaml-cpp0.7 libcpp-httplib0.11"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $RUNTIME_PACKAGES \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 monta \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/monta --no-create-home \
      --shell /usr/sbin/nologin monta \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/monta
COPY --from=build /out/monta-planner /usr/local/bin/monta-planner
# Fail the build if a linked library is missing from RUNTIME_PACKAGES.
RUN ! ldd /usr/local/bin/monta-planner | grep "not found"
USER 65532:65532
WORKDIR /var/lib/monta
# gRPC API, Prometheus /metrics, admission webhook (HTTPS)
EXPOSE 7400 7401 8443
ENTRYPOINT ["/usr/local/bin/monta-planner"]
