"""Python stubs for proto/monta/v1, generated when first needed (never committed).

Uses an importable `proto.monta.v1.planner_pb2` when there is one (e.g. generated at build
time onto PYTHONPATH); otherwise runs Debian's protoc with grpc_python_plugin over the
.proto files into a cache directory. The proto tree is found at $MONTA_PROTO_ROOT, else
relative to this file (a source checkout: python/monta/ -> repository root).
"""

import glob
import hashlib
import importlib
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from typing import Any

from monta.plan import Plan, PlanError, normalize_strategy

PROTO_DIR = os.path.join("proto", "monta", "v1")


def _proto_root() -> str:
    candidates = [os.environ.get("MONTA_PROTO_ROOT", ""),
                  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                  os.getcwd()]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, PROTO_DIR, "planner.proto")):
            return root
    raise PlanError("monta: cannot find proto/monta/v1/planner.proto to generate the gRPC "
                    "stubs; set MONTA_PROTO_ROOT to the repository root")


def generate(out_dir: str, root: str) -> None:
    """protoc --python_out + --grpc_python_out for every proto/monta/v1/*.proto."""
    protos = sorted(os.path.relpath(p, root)
                    for p in glob.glob(os.path.join(root, PROTO_DIR, "*.proto")))
    protoc = os.environ.get("MONTA_PROTOC", "protoc")
    plugin = os.environ.get("MONTA_GRPC_PYTHON_PLUGIN", "/usr/bin/grpc_python_plugin")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [protoc, "-I.", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
           f"--plugin=protoc-gen-grpc_python={plugin}"] + protos
    try:
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    except OSError as e:
        raise PlanError(f"monta: cannot run {protoc} to generate the gRPC stubs ({e}); install "
                        "protobuf-compiler and protobuf-compiler-grpc") from None
    if done.returncode != 0:
        raise PlanError(f"monta: protoc failed generating the gRPC stubs: {done.stderr.strip()}")


def _import_stubs():
    try:
        return (importlib.import_module("proto.monta.v1.planner_pb2"),
                importlib.import_module("proto.monta.v1.planner_pb2_grpc"),
                importlib.import_module("proto.monta.v1.strategy_pb2"))
    except ImportError:
        pass
    root = _proto_root()
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(root, PROTO_DIR, "*.proto"))):
        with open(path, "rb") as f:
            digest.update(f.read())
    cache = os.environ.get("MONTA_STUBS_DIR") or os.path.join(
        tempfile.gettempdir(), f"monta-py-stubs-{os.getuid()}-{digest.hexdigest()[:16]}")
    if not os.path.isfile(os.path.join(cache, PROTO_DIR, "planner_pb2_grpc.py")):
        parent = os.path.dirname(os.path.abspath(cache))
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".monta-stubs-", dir=parent)  # same file system
        generate(tmp, root)
        try:
            os.rename(tmp, cache)  # atomic: concurrent ranks never see half a tree
        except OSError as e:
            if not os.path.isfile(os.path.join(cache, PROTO_DIR, "planner_pb2_grpc.py")):
                raise PlanError(f"monta: cannot place the gRPC stubs in {cache}: {e}") from None
            # else another process won the race; its tree is complete
    # `proto` is a namespace package: this portion joins any other on sys.path.
    sys.path.insert(0, cache)
    importlib.invalidate_caches()
    for name in [m for m in sys.modules if m == "proto" or m.startswith("proto.")]:
        del sys.modules[name]
    return (importlib.import_module("proto.monta.v1.planner_pb2"),
            importlib.import_module("proto.monta.v1.planner_pb2_grpc"),
            importlib.import_module("proto.monta.v1.strategy_pb2"))


def _message(cls, value: Any, what: str):
    from google.protobuf import json_format
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    try:
        return json_format.ParseDict(value, cls())
    except json_format.ParseError as e:
        raise PlanError(f"{what}: {e}") from None


# Mutual TLS to the planner, as monta-planner requires unless it runs with --insecure:
# PEM files named by these variables (the same files as montactl's --tls_* flags; a
# training pod mounts a reader certificate). Without them the channel is plaintext.
ENV_TLS_FILES = ("MONTA_TLS_CA_FILE", "MONTA_TLS_CERT_FILE", "MONTA_TLS_KEY_FILE")


def _channel(grpc, address: str):
    given = [name for name in ENV_TLS_FILES if os.environ.get(name)]
    if not given:
        return grpc.insecure_channel(address)
    if len(given) != len(ENV_TLS_FILES):
        raise PlanError(f"{', '.join(ENV_TLS_FILES)}: set all three for mutual TLS, "
                        f"got only {', '.join(given)}")
    contents = []
    for name in ENV_TLS_FILES:
        try:
            with open(os.environ[name], "rb") as f:
                contents.append(f.read())
        except OSError as e:
            raise PlanError(f"{name}={os.environ[name]}: {e.strerror}") from None
    ca, cert, key = contents
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert))


def get_strategy_reply(address: str, job: Any, placement: Any, options: Any,
                       timeout_s: float):
    """GetStrategy at `address`: (request, reply) as messages, for callers that want the
    whole answer (every candidate, the evidence); Plan.request wraps it."""
    import grpc
    planner_pb2, planner_grpc, strategy_pb2 = _import_stubs()
    request = strategy_pb2.StrategyRequest(
        job=_message(strategy_pb2.MoeJob, job, "job"),
        placement=_message(strategy_pb2.Placement, placement, "placement"),
        options=_message(strategy_pb2.StrategyOptions, options, "options"))
    with _channel(grpc, address) as channel:
        stub = planner_grpc.PlannerStub(channel)
        try:
            reply = stub.GetStrategy(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise PlanError(f"GetStrategy at {address}: {e.code().name}: {e.details()}") from None
    return request, reply


def _enum_name(message, field_name: str) -> str:
    """The enum value's own name, wherever in the contract the enum is declared."""
    enum = message.DESCRIPTOR.fields_by_name[field_name].enum_type
    return enum.values_by_number[getattr(message, field_name)].name


def _candidate_plan(candidate, evidence: str, what: str) -> Plan:
    strategy = normalize_strategy(_enum_name(candidate, "kind"), what)
    fwd, bwd = candidate.forward_seconds_per_layer, candidate.backward_seconds_per_layer
    return Plan(strategy=strategy, num_chunks=max(1, candidate.chunks_effective),
                predicted_forward_seconds_per_layer=fwd,
                predicted_backward_seconds_per_layer=bwd,
                predicted_alltoall_seconds_per_layer=fwd + bwd,
                speedup_over_flat=candidate.speedup_over_flat or None,
                evidence_source=evidence, origin="planner")


def plan_from_reply(address: str, request, reply) -> Plan:
    """The chosen candidate as a Plan; `candidates` holds every feasible one (best first),
    so a caller can see what the planner predicted for the strategies it did not choose."""
    chosen = reply.chosen
    if chosen.kind == 0:  # STRATEGY_KIND_UNSPECIFIED
        raise PlanError(f"GetStrategy at {address}: no strategy chosen (none feasible)")
    evidence = _enum_name(reply.evidence, "origin").lower()
    evidence = evidence[len("evidence_source_"):] if evidence.startswith("evidence_source_") \
        else evidence
    if evidence == "unspecified":
        evidence = ""
    candidates = tuple(_candidate_plan(c, evidence, f"GetStrategy reply candidates[{i}].kind")
                       for i, c in enumerate(reply.candidates) if c.feasible)
    plan = replace(_candidate_plan(chosen, evidence, "GetStrategy reply chosen.kind"),
                   candidates=candidates)
    sources = {"world_size": "job.world_size", "tensor_parallel_size": "job.tensor_parallel_size",
               "expert_parallel_size": "job.expert_parallel_size",
               "gpus_per_node": "placement.gpus_per_node"}
    return plan.with_layout(sources=sources,
                            world_size=request.job.world_size or None,
                            tensor_parallel_size=request.job.tensor_parallel_size or None,
                            expert_parallel_size=request.job.expert_parallel_size or None,
                            gpus_per_node=request.placement.gpus_per_node or None)


def get_strategy(address: str, job: Any, placement: Any, options: Any,
                 timeout_s: float) -> Plan:
    request, reply = get_strategy_reply(address, job, placement, options, timeout_s)
    return plan_from_reply(address, request, reply)
