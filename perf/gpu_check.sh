#!/usr/bin/env bash
# Builds and runs Monta's NCCL paths, with their data checks, on whatever GPUs
# this machine has (one rank per GPU, threads of one process). Meant for the
# day a GPU machine is lent: finishes in well under 5 minutes on a warm
# machine. Exits 2 with "no GPU: ..." where there is none, 1 if any data check
# or test fails.
#
#   perf/gpu_check.sh            # from the repository root or anywhere
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "no GPU: nvidia-smi not found" >&2
  exit 2
fi
if ! gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); then gpus=0; fi
if [[ "${gpus}" -lt 1 ]]; then
  echo "no GPU: nvidia-smi lists no device" >&2
  exit 2
fi
echo "== ${gpus} GPU(s)"
nvidia-smi -L

gpu_tests=(//agent/comm:nccl_communicator_test //agent/comm:communicator_factory_test
           //agent/bench:schedule_gpu_test)
bazel build -c opt //perf:monta-a2a-bench "${gpu_tests[@]}"
bazel test -c opt --test_output=errors "${gpu_tests[@]}"
bin="$(bazel info -c opt bazel-bin)/perf/monta-a2a-bench"

common=(--backend=nccl --ranks="${gpus}" --min_bytes=1024
        --max_bytes=$((256 << 20)) --step_factor=4 --iters=20 --warmup=5
        --timeout_s=60)
tp=1
if (( gpus % 2 == 0 && gpus >= 2 )); then tp=2; fi

# Two communicators (EP, TP) run kernels concurrently in the pipelined
# schedules; keep their launches in host program order on every rank.
export NCCL_LAUNCH_ORDER_IMPLICIT=1
status=0
run() {
  echo "== monta-a2a-bench $*"
  if ! timeout 120 "${bin}" "${common[@]}" "$@"; then status=1; fi
}
run --strategy=alltoall
run --strategy=allgather
run --strategy=copy
run --strategy=flat
run --strategy=tp_dedup --tp="${tp}"
run --strategy=tp_dedup_pipelined --tp="${tp}" --chunks=1,4,16
run --strategy=hierarchical --ranks_per_node=$(( gpus > 1 ? gpus / 2 : 1 ))
run --mode=pipeline_report --tp="${tp}" --min_bytes=$((1 << 20))
exit "${status}"
