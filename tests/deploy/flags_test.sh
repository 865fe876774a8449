#!/usr/bin/env bash
# Every --flag the manifests pass to monta-planner / monta-agent is defined by that binary
# (an ABSL_FLAG in server/, agent/ or common/), so no pod crash-loops on an unknown flag.
# Flags that the planner/agent work in progress is adding are listed in PENDING and only
# reported while they are missing. Reads the source tree (tagged "external": never cached).
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

# Flags the binaries are still gaining (none now: every flag the manifests pass exists).
declare -A PENDING=()

src="$(cd "$HERE_SRC/../.." && pwd)"
[[ -f "$src/server/main.cc" && -f "$src/agent/main.cc" ]] || skip "source tree not found at $src"
need_kubectl

defined() { # defined DIR... : flag names defined by ABSL_FLAG in non-test .cc files
  # Joined into one line first: clang-format may break ABSL_FLAG( across lines.
  find "$@" -name '*.cc' ! -name '*_test.cc' -print0 | xargs -0 cat | tr '\n' ' ' |
    grep -oE 'ABSL_FLAG\([[:space:]]*[^,]+,[[:space:]]*[A-Za-z0-9_]+' | sed -E 's/.*,[[:space:]]*//' | sort -u
}
planner_flags="$(defined "$src/server" "$src/common")"
agent_flags="$(defined "$src/agent" "$src/common")"

# The args of each container, one per line, from the rendered YAML.
args_of() { # args_of CONTAINER_NAME
  awk -v want="$1" '
    /^kind: /            { kind = $2 }
    /^ *- args:/         { inargs = 1; next }
    inargs && /^ *- --/  { sub(/^ *- /, ""); buf = buf $0 "\n"; next }
    inargs               { inargs = 0 }
    /^ *name: /          { if (buf != "") { if ($2 == want) printf "%s", buf; buf = "" } }
  ' "$out"
}

bad=0
for overlay in gpu ha; do
out="$SCRATCH/$overlay.yaml"
render "overlays/$overlay" "$out"
echo "deploy/overlays/$overlay:"
for c in planner agent; do
  flags="$planner_flags"; [[ $c == agent ]] && flags="$agent_flags"
  args="$(args_of "$c")"
  [[ -n "$args" ]] || fail "no args found for container $c"
  while IFS= read -r a; do
    name="${a#--}"; name="${name%%=*}"
    if grep -qxF "$name" <<<"$flags"; then
      echo "$c: --$name defined"
    elif [[ -n "${PENDING[$c:$name]:-}" ]]; then
      echo "$c: --$name not defined yet (pending in the $c's work in progress)"
    else
      echo "FAIL $c: --$name is passed by deploy/ but not defined by the $c" >&2
      bad=1
    fi
  done <<<"$args"
done
done
((bad == 0)) || fail "unknown flags"
echo "PASSED: flags"
