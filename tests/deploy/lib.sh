# shellcheck shell=bash disable=SC2034
# Shared by the sh_tests in tests/deploy/ (sourced, not run).
#   DEPLOY      the deploy/ tree, copied (symlinks resolved) into a scratch directory:
#               kustomize refuses files that are symlinks out of the kustomization root,
#               and Bazel's runfiles are symlinks.
#   HERE_SRC    the real tests/deploy/ source directory (node_modules and .tools live there,
#               installed by tests/deploy/install.sh, which scripts/setup.sh runs)
#   skip MSG    ends the test as skipped, saying why it did not run (a tool is missing):
#               Bazel 4 has no skip status, so it prints "MONTA_TEST_SKIPPED: MSG" and exits
#               0; scripts/test.sh finds that line in the test.log and counts it as skipped
#   fail MSG    ends the test as failed
set -euo pipefail

skip() { echo "MONTA_TEST_SKIPPED: $*"; exit 0; }
fail() { echo "FAILED: $*" >&2; exit 1; }

_runfiles="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}"
if [[ -z "${TEST_SRCDIR:-}" || ! -d "$_runfiles/deploy" ]]; then
  # Outside Bazel: run from the source tree.
  _runfiles="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fi
HERE_SRC="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
SCRATCH="${TEST_TMPDIR:-$(mktemp -d)}"
DEPLOY="$SCRATCH/deploy"
if [[ ! -d "$DEPLOY" ]]; then
  cp -rL "$_runfiles/deploy" "$DEPLOY"
fi
TESTS="$_runfiles/tests/deploy"

# Debian's kubectl (package kubernetes-client, 1.20, kustomize v2 embedded). Never another
# vendor's kubectl: the manifests are written for, and checked with, this one.
find_debian_kubectl() {
  if [[ -n "${MONTA_KUBECTL:-}" ]]; then echo "$MONTA_KUBECTL"; return; fi
  if dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null | grep -q "install ok installed"; then
    echo /usr/bin/kubectl; return
  fi
  if [[ -x "$HERE_SRC/.tools/kubernetes-client/usr/bin/kubectl" ]]; then
    echo "$HERE_SRC/.tools/kubernetes-client/usr/bin/kubectl"; return
  fi
  echo ""
}

need_kubectl() {
  KUBECTL="$(find_debian_kubectl)"
  [[ -n "$KUBECTL" ]] || skip "Debian kubectl (package kubernetes-client) not found; run tests/deploy/install.sh"
}

need_node() {
  command -v node >/dev/null 2>&1 || skip "node not found (Node.js >= 18 is needed)"
  NODE_MODULES="$HERE_SRC/node_modules"
  [[ -d "$NODE_MODULES/kubernetes-models" && -d "$NODE_MODULES/js-yaml" ]] ||
    skip "tests/deploy/node_modules missing; run tests/deploy/install.sh"
  export NODE_PATH="$NODE_MODULES"
}

# render DIR OUT: kubectl kustomize deploy/DIR into OUT (fails the test on error).
render() {
  local dir="$1" out="$2" err="$SCRATCH/render.err"
  if ! "$KUBECTL" kustomize "$DEPLOY/$dir" >"$out" 2>"$err"; then
    cat "$err" >&2
    fail "kubectl kustomize deploy/$dir"
  fi
  [[ -s "$out" ]] || fail "kubectl kustomize deploy/$dir rendered nothing"
}
