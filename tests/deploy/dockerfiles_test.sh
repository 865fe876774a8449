#!/usr/bin/env bash
# Static checks of deploy/docker/*.Dockerfile (no container engine is needed): a debian:12
# build stage that installs with scripts/setup.sh and builds with the repository's Bazel
# command, a debian:12-slim runtime stage with Debian runtime packages that exist, a
# non-root user, and the ldd guard against missing libraries; for the planner's
# node-labels sidecar, kubectl on debian:12-slim with its script and a non-root user.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

apt_ok=0
if command -v apt-cache >/dev/null 2>&1 && apt-cache show libc6 >/dev/null 2>&1; then apt_ok=1; fi

for name in planner agent; do
  f="$DEPLOY/docker/$name.Dockerfile"
  [[ -f "$f" ]] || fail "missing deploy/docker/$name.Dockerfile"
  [[ -f "$f.dockerignore" ]] || fail "missing deploy/docker/$name.Dockerfile.dockerignore"
  case $name in
    planner) target="//server:monta-planner" ;;
    agent) target="//agent:monta-agent" ;;
  esac
  froms="$(grep -E '^FROM ' "$f" | tr '\n' '|')"
  [[ "$froms" == "FROM debian:12 AS build|FROM debian:12-slim|" ]] ||
    fail "$name: stages must be 'FROM debian:12 AS build' then 'FROM debian:12-slim' (got $froms)"
  grep -q 'scripts/setup.sh' "$f" || fail "$name: build stage does not install with scripts/setup.sh"
  grep -qF "bazel build -c opt $target" "$f" || fail "$name: no 'bazel build -c opt $target'"
  grep -qE '^COPY --from=build ' "$f" || fail "$name: runtime stage does not copy from the build stage"
  user="$(grep -E '^USER ' "$f" | tail -1 | awk '{print $2}')"
  [[ -n "$user" && "${user%%:*}" != "0" && "${user%%:*}" != "root" ]] || fail "$name: last USER must be non-root (got '$user')"
  grep -qE 'ldd .*not found' "$f" || fail "$name: no ldd guard for missing runtime libraries"
  pkgs="$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' "$f")"
  [[ -n "$pkgs" ]] || fail "$name: no ARG RUNTIME_PACKAGES"
  known=""
  # shellcheck disable=SC2086
  if ((apt_ok)); then known="$(apt-cache show --no-all-versions $pkgs 2>/dev/null | sed -n 's/^Package: //p')"; fi
  for p in $pkgs; do
    [[ "$p" != *-dev ]] || fail "$name: runtime package $p is a -dev package"
    if ((apt_ok)); then
      grep -qxF "$p" <<<"$known" || fail "$name: Debian has no package '$p'"
    fi
  done
  # The runtime must not carry the build toolchain.
  runtime="$(sed -n '/^FROM debian:12-slim/,$p' "$f")"
  for bad in bazel g++ gcc protobuf-compiler setup.sh; do
    ! grep -qw -- "$bad" <<<"$runtime" || fail "$name: runtime stage mentions $bad"
  done
  echo "$name: ok (runtime packages: $pkgs)"
done
# The planner pod's node-labels sidecar: kubectl from the Kubernetes project's image on
# debian:12-slim (a shell for the refresh loop), its script, a non-root user.
f="$DEPLOY/docker/node-labels.Dockerfile"
[[ -f "$f" && -f "$f.dockerignore" ]] || fail "missing deploy/docker/node-labels.Dockerfile(.dockerignore)"
froms="$(grep -E '^FROM ' "$f" | tr '\n' '|')"
[[ "$froms" =~ ^"FROM registry.k8s.io/kubectl:v"[0-9]+\.[0-9]+\.[0-9]+" AS kubectl|FROM debian:12-slim|"$ ]] ||
  fail "node-labels: stages must be 'FROM registry.k8s.io/kubectl:vX.Y.Z AS kubectl' then 'FROM debian:12-slim' (got $froms)"
grep -qxF 'COPY --from=kubectl /bin/kubectl /usr/local/bin/kubectl' "$f" || fail "node-labels: does not copy kubectl"
grep -qE '^COPY deploy/docker/node-labels.sh ' "$f" || fail "node-labels: does not copy its script"
grep -qxF '!deploy/docker/node-labels.sh' "$f.dockerignore" || fail "node-labels: .dockerignore leaves out its script"
user="$(grep -E '^USER ' "$f" | tail -1 | awk '{print $2}')"
[[ -n "$user" && "${user%%:*}" != "0" && "${user%%:*}" != "root" ]] || fail "node-labels: last USER must be non-root (got '$user')"
[[ -x "$DEPLOY/docker/node-labels.sh" ]] || fail "node-labels: deploy/docker/node-labels.sh is not executable"
sh -n "$DEPLOY/docker/node-labels.sh" || fail "node-labels: deploy/docker/node-labels.sh does not parse"
echo "node-labels: ok"
((apt_ok)) || echo "note: apt lists unavailable; runtime package names not checked against Debian"
echo "PASSED: Dockerfiles"
