#!/usr/bin/env python3
"""From admission to a training step, on loopback.

1. Starts the real planner (monta-planner) with its HTTPS admission webhook and a throwaway
   self-signed certificate (openssl).
2. Sends a batch/v1 Job's AdmissionReview to /mutate, as the API server would, and applies
   the returned JSON Patch to the Job.
3. Starts the Job's training processes (WORLD ranks, torchrun-style env) with the container
   env of the patched Job: what the webhook injected (MONTA_STRATEGY, MONTA_NUM_CHUNKS,
   MONTA_DECISION_ID, ...) and MONTA_MOE_SPEC, which the pod spec maps from the monta.io/moe
   annotation through the downward API (resolved here as the kubelet would).
4. Each rank runs examples/moe_layer.py's MoE layer with monta.Plan.from_env() for a few
   steps, in the expert layout the planner priced (MONTA_EXPERT_LAYOUT; the job's
   experts_tensor_parallel when --experts_tensor_parallel sets it, else the planner's
   default), and logs the decision id and the layout; this script checks the log says them.

  python3 examples/admission_to_step.py --planner bazel-bin/server/monta-planner

with a python3 that has monta installed (pip install --no-build-isolation ./python; the
ranks run under the same interpreter). Exit status 0 when the steps ran and the training
log carries the decision id.
"""

import argparse
import base64
import copy
import datetime
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time

import monta  # installed: pip install --no-build-isolation ./python

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable  # the ranks import the same installed monta

SPEC = {
    "job": {"name": "admission-to-step", "hidden_size": 64, "num_experts": 4, "top_k": 2,
            "capacity_factor": 1.0, "micro_batch_size": 2, "sequence_length": 32,
            "bytes_per_element": 4, "moe_layers": 2, "world_size": 4,
            "tensor_parallel_size": 2, "expert_parallel_size": 2,
            "pipeline_parallel_size": 1, "data_parallel_size": 2},
    "placement": {"profile": "cpu-gloo", "nodes": 2, "gpus_per_node": 2},
}


def log(msg):
    print(f"admission_to_step: {msg}", flush=True)


def wait_for(predicate, timeout_s, what):
    """Polls predicate until it returns a true value; raises with `what` on timeout."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


def make_cert(workdir):
    cert, key = os.path.join(workdir, "tls.crt"), os.path.join(workdir, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=monta-planner.monta-system.svc",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def start_planner(binary, workdir, cert, key):
    port_file = os.path.join(workdir, "ports.json")
    log_path = os.path.join(workdir, "planner.log")
    proc = subprocess.Popen(
        # gRPC in plaintext on loopback (--insecure): this example is about the webhook;
        # a deployment's planner requires mutual TLS (docs/ARCHITECTURE.md, "Who may call what").
        [binary, "--listen=127.0.0.1:0", "--insecure", "--metrics_listen=127.0.0.1:0",
         "--webhook_listen=127.0.0.1:0", f"--tls_cert={cert}", f"--tls_key={key}",
         "--bench_on_register=false", "--bench_interval_seconds=0",
         f"--port_file={port_file}"],
        stdout=open(log_path, "w"), stderr=subprocess.STDOUT)

    def ports():
        if proc.poll() is not None:
            raise RuntimeError(f"planner exited {proc.returncode}: {open(log_path).read()}")
        try:
            with open(port_file) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return proc, wait_for(ports, 60, "the planner's port file"), log_path


def job_object():
    container = {"name": "trainer", "image": "trainer:1", "command": ["train"],
                 "env": [{"name": "MONTA_MOE_SPEC", "valueFrom": {"fieldRef": {
                     "fieldPath": "metadata.annotations['monta.io/moe']"}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "moe-train", "namespace": "team-moe",
                         "annotations": {"monta.io/moe": json.dumps(SPEC)}},
            "spec": {"template": {"metadata": {}, "spec": {
                "restartPolicy": "Never", "containers": [container]}}}}


def review(obj):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "admission-to-step-1", "operation": "CREATE",
                        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                        "namespace": "team-moe", "object": obj}}


def post_review(port, cert, body):
    context = ssl.create_default_context(cafile=cert)  # verifies the webhook's certificate
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    conn.request("POST", "/mutate", json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    text = reply.read().decode()
    if reply.status != 200:
        raise RuntimeError(f"/mutate answered {reply.status}: {text}")
    return json.loads(text)["response"]


def apply_patch(obj, ops):
    """RFC 6902 add / replace (what the webhook emits) on a copy of obj."""
    out = copy.deepcopy(obj)
    for op in ops:
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"unexpected patch op {op}")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = out
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif op["op"] == "add":
                parent.insert(int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            parent[last] = op["value"]
    return out


def container_env(job):
    """The first container's env as the kubelet resolves it (values, annotation refs)."""
    annotations = job["spec"]["template"]["metadata"].get("annotations", {})
    annotations = dict(job["metadata"].get("annotations", {}), **annotations)
    env = {}
    for var in job["spec"]["template"]["spec"]["containers"][0].get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        key = path[len("metadata.annotations['"):-2]
        env[var["name"]] = annotations[key]
    return env


def rendezvous_store(world, timeout_s):
    """The ranks' TCP store, hosted here as torchrun's agent hosts it: bound to a port the
    kernel picks (no port is chosen before it is bound, so none can be taken in between);
    the ranks connect to it as clients (TORCHELASTIC_USE_AGENT_STORE, with the restart
    count torchrun also sets)."""
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", 0, world, True, datetime.timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def run_training(env, world, steps, workdir, timeout_s):
    store = rendezvous_store(world, timeout_s)
    procs, logs = [], []
    for rank in range(world):
        rank_env = dict(os.environ, **env)
        rank_env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % 2),
                        LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
                        TORCHELASTIC_RESTART_COUNT="0", OMP_NUM_THREADS="1")
        path = os.path.join(workdir, f"train-rank{rank}.log")
        logs.append(path)
        procs.append(subprocess.Popen(
            [PY, os.path.join(HERE, "train_moe.py"), f"--steps={steps}"], env=rank_env,
            stdout=open(path, "w"), stderr=subprocess.STDOUT))
    end = time.monotonic() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    return codes, logs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--planner", default=os.path.join(ROOT, "bazel-bin/server/monta-planner"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--timeout_s", type=float, default=240)
    parser.add_argument("--allowed", default="",
                        help="restrict the planner to this StrategyKind, e.g. "
                             "STRATEGY_KIND_TP_DEDUP_PIPELINED (options.allowed)")
    parser.add_argument("--max_chunks", type=int, default=0)
    parser.add_argument("--experts_tensor_parallel", choices=["true", "false"], default=None,
                        help="the job's experts_tensor_parallel (default: not set, which the "
                             "planner prices as not_tensor_parallel)")
    args = parser.parse_args()
    expected_layout = monta.NOT_TENSOR_PARALLEL  # the planner's default (docs/MODEL.md §4)
    if args.experts_tensor_parallel:
        SPEC["job"]["experts_tensor_parallel"] = args.experts_tensor_parallel == "true"
        if args.experts_tensor_parallel == "true":
            expected_layout = monta.TENSOR_PARALLEL
    if args.allowed or args.max_chunks:
        SPEC["options"] = {"allowed": [args.allowed] if args.allowed else [],
                           "max_chunks": args.max_chunks}
    workdir = tempfile.mkdtemp(prefix="monta-admission-to-step-")
    cert, key = make_cert(workdir)
    planner, ports, planner_log = start_planner(args.planner, workdir, cert, key)
    try:
        job = job_object()
        response = post_review(ports["webhook"], cert, review(job))
        if "patch" not in response:
            raise RuntimeError(f"no patch in the webhook's answer: {response}")
        patched = apply_patch(job, json.loads(base64.b64decode(response["patch"])))
        env = container_env(patched)
        decision_id = patched["metadata"]["annotations"]["monta.io/decision-id"]
        log(f"webhook decision {decision_id}: " + " ".join(
            f"{k}={v}" for k, v in sorted(env.items()) if k != "MONTA_MOE_SPEC"))
        # The same job asked over gRPC must get the same strategy (one planner, one model).
        asked = monta.Plan.request(f"127.0.0.1:{ports['grpc']}", SPEC["job"], SPEC["placement"],
                                   SPEC.get("options"))
        log(f"GetStrategy over gRPC: {asked} (K={asked.num_chunks}, predicted forward "
            f"{asked.predicted_forward_seconds_per_layer:.3g} s/layer)")
        # The reply's candidates: the chosen one first, flat's prediction alongside.
        first = asked.candidates[0] if asked.candidates else None
        if first is None or (first.strategy, first.num_chunks) != (asked.strategy,
                                                                    asked.num_chunks):
            raise RuntimeError(f"GetStrategy candidates do not start with the chosen "
                               f"{asked}: {[str(c) for c in asked.candidates]}")
        if not SPEC.get("options") and not (asked.candidate("flat") and asked.candidate(
                "flat").predicted_forward_seconds_per_layer > 0):
            raise RuntimeError("GetStrategy offered no flat candidate with a prediction")
        injected = monta.Plan.from_env(env)
        if (asked.strategy, asked.num_chunks) != (injected.strategy, injected.num_chunks):
            raise RuntimeError(f"webhook chose {injected}, gRPC {asked}")
        # Both name the layout the planner priced, and the ranks run it.
        if (asked.expert_layout, injected.expert_layout) != (expected_layout,) * 2:
            raise RuntimeError(f"expert layout: gRPC {asked.expert_layout}, webhook "
                               f"{injected.expert_layout}, expected {expected_layout}")
        codes, logs = run_training(env, args.world, args.steps, workdir, args.timeout_s)
        text = "".join(open(p).read() for p in logs)
        sys.stdout.write(open(logs[0]).read())
        if any(c != 0 for c in codes):
            raise RuntimeError(f"training ranks exited {codes}:\n{text}")
        if f"decision {decision_id}" not in text or f"step {args.steps}" not in text:
            raise RuntimeError(f"decision {decision_id} or step {args.steps} not in the "
                               f"training log:\n{text}")
        running = f"running experts {expected_layout}"
        if text.count(running) != args.world:
            raise RuntimeError(f"not every rank logged {running!r}:\n{text}")
        log(f"OK: {args.world} ranks ran {args.steps} steps with decision {decision_id}, "
            f"experts {expected_layout}")
        return 0
    finally:
        planner.send_signal(signal.SIGTERM)
        try:
            planner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            planner.kill()


if __name__ == "__main__":
    sys.exit(main())
