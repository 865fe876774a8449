#!/usr/bin/env bash
# Installs the Debian 12 packages Monta builds and tests with, only those missing.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  # scripts/test.sh's checks: the Clang build (thread-safety analysis) and scripts/format.sh.
  clang-14
  clang-format-14
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  libabsl-dev
  prometheus-cpp-dev
  libgloo-dev
  libsqlite3-dev
  nlohmann-json3-dev
  libyaml-cpp-dev
  libcpp-httplib-dev
  libssl-dev
  openssl
  libgtest-dev
  libgmock-dev
  googletest
  libbenchmark-dev
  iproute2
  # etcd for planner replicas (issue 20): the server and etcdctl its tests run
  # (tests/testing/etcd_cluster), and its v3 protos, from which the build generates the
  # C++ client's stubs (third_party/etcd_configure.bzl; required).
  etcd-server
  etcd-client
  golang-etcd-server-dev
  # tests/clock_and_shutdown_test steps the planner's wall clock with libfaketime.
  faketime
  curl
  python3
  # The training-side package python/monta and its tests (Debian's /usr/bin/python3).
  python3-torch
  python3-numpy
  python3-grpcio
  python3-protobuf
  # Installing it offline (pip install --no-build-isolation ./python; the tests do so into
  # a fresh venv): setuptools builds it, protoc + grpc_python_plugin (above) its stubs.
  python3-pip
  python3-setuptools
  python3-venv
  python3-wheel
)
# Extra packages for the consumer tests (real Prometheus server, promtool).
if [[ "${MONTA_SETUP_EXTRAS:-1}" == "1" ]]; then
  PACKAGES+=(prometheus)
fi

# Tools of the deploy/ checks (tests/deploy/): Debian's kubectl 1.20 (kubernetes-client) and
# the npm packages of tests/deploy/package-lock.json. Best effort: without them those tests
# report SKIPPED. Runs before the early exit below, since it has its own idempotence checks.
install_deploy_tools() {
  if [[ "${MONTA_SETUP_EXTRAS:-1}" == "1" ]]; then
    "$(dirname "$0")/../tests/deploy/install.sh" ||
      echo "setup: deploy test tools not installed; //tests/deploy tests will skip" >&2
  fi
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
  install_deploy_tools
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_deploy_tools
echo "setup: done"
