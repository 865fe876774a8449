#!/usr/bin/env bash
# Installs what the tests in tests/deploy/ need; idempotent, quiet when nothing is missing.
#   - Debian's kubectl 1.20 (package kubernetes-client; `kubectl kustomize` embeds kustomize v2)
#   - the Node packages in package-lock.json (npm ci into tests/deploy/node_modules)
# promtool comes from Debian's `prometheus` package, which scripts/setup.sh installs.
#
# kubectl: only Debian's kubernetes-client is used. Where /usr/bin/kubectl already belongs to
# another package (e.g. a cloud SDK's kubectl), installing kubernetes-client would fail on the
# file conflict, so the Debian .deb is downloaded with apt and unpacked into
# tests/deploy/.tools/kubernetes-client/ instead; the tests look there too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# --- kubectl (Debian kubernetes-client) --------------------------------------------------
tools="$here/.tools/kubernetes-client"
if installed kubernetes-client; then
  :
elif [[ -x "$tools/usr/bin/kubectl" ]]; then
  :
else
  owner="$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)"
  if [[ -z "$owner" && ! -e /usr/bin/kubectl ]]; then
    echo "install.sh: installing Debian kubernetes-client"
    $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null ||
      { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null; }
  else
    echo "install.sh: /usr/bin/kubectl belongs to '${owner:-no package}'; unpacking Debian kubernetes-client into $tools"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && { apt-get download kubernetes-client >/dev/null 2>&1 ||
      { $SUDO apt-get update -qq && apt-get download kubernetes-client >/dev/null; }; })
    mkdir -p "$tools"
    dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$tools"
  fi
fi

# --- Node packages ---------------------------------------------------------------------
if ! command -v npm >/dev/null 2>&1; then
  echo "install.sh: npm not found: the Node-based deploy tests will skip (they need Node.js >= 18 and npm)" >&2
  exit 0
fi
stamp="$here/node_modules/.monta-lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "install.sh: npm ci in tests/deploy"
  (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" >"$stamp"
fi
