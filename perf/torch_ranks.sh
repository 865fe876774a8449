# shellcheck shell=bash
# Sourced by the perf scripts that run torch.distributed ranks inside the emulated
# cluster's node namespaces (perf/moe_step_bench.sh, perf/fabric_order_bench.sh). The
# caller sets WHO (its name, for messages), WORK (its temporary directory), CL (the
# emulated-cluster.sh command), NAME and OWN (true: tear the cluster down on exit) first.
#
#   torch_ranks_setup          cleanup on EXIT (kill PIDS, down an owned cluster, rm WORK),
#                              and monta from this checkout in a venv of this run that sees
#                              Debian's python3-torch and python3-grpcio: PY
#   waited CMD...              runs CMD in the background and waits for it (bash defers a
#                              trapped signal until a foreground command ends, but `wait`
#                              returns at once, so TERM tears down promptly)
#   run_ranks WORLD FN ARGS... runs `FN RANK ARGS...` for ranks WORLD-1..1 in the
#                              background (logs in WORK/rankR.log) and rank 0 in the
#                              foreground; returns the worst exit status, printing the tail
#                              of each failed rank's log. FN must exec, so that killing the
#                              subshell's pid stops the rank.

# shellcheck disable=SC2317  # called by the EXIT trap
torch_ranks_cleanup() {
  local rc=$?
  local pid
  for pid in "${PIDS[@]:-}"; do
    if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
  done
  if ((${#PIDS[@]})); then sleep 1; fi
  if [[ "$OWN" == true ]]; then "${CL[@]}" down --name="$NAME" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
  exit "$rc"
}

torch_ranks_setup() {
  PIDS=()
  trap torch_ranks_cleanup EXIT
  trap 'exit 130' INT TERM
  /usr/bin/python3 -m venv --system-site-packages --without-pip "$WORK/venv"
  PIP_CONFIG_FILE=/dev/null "$WORK/venv/bin/python" -m pip install --no-build-isolation \
    --no-index --no-deps --no-cache-dir --disable-pip-version-check -q ./python \
    >"$WORK/pip.log" 2>&1 ||
    { cat "$WORK/pip.log" >&2; echo "$WHO: pip install ./python failed" >&2; exit 1; }
  # shellcheck disable=SC2034  # read by the sourcing script
  PY="$WORK/venv/bin/python"
}

waited() {
  "$@" &
  PIDS+=($!)
  wait "$!"
}

run_ranks() { # run_ranks WORLD FN ARGS...
  local world=$1 fn=$2 r rc worst=0 i
  shift 2
  local rank_pids=()
  for ((r = world - 1; r >= 1; r--)); do
    "$fn" "$r" "$@" >"$WORK/rank$r.log" 2>&1 &
    PIDS+=($!)
    rank_pids+=($!)
  done
  waited "$fn" 0 "$@" || worst=$?
  for i in "${!rank_pids[@]}"; do
    rc=0
    wait "${rank_pids[$i]}" || rc=$?
    if ((rc != 0)); then
      r=$((world - 1 - i))
      echo "$WHO: rank $r exited $rc:" >&2
      tail -20 "$WORK/rank$r.log" >&2
      ((rc > worst)) && worst=$rc
    fi
  done
  PIDS=()
  return "$worst"
}
