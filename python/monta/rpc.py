"""The planner's gRPC contract (proto/monta/v1) from Python: the stubs, the channel, GetStrategy.

The stubs are generated when the package is built (setup.py) into the private subpackage
monta._proto; nothing is generated or put on sys.path at run time. grpcio and the stubs are
imported on first use, so `import monta` needs neither.
"""

import os
from types import SimpleNamespace
from typing import Any, List, Sequence, Tuple, Union

from monta.errors import PlanError

# Mutual TLS to the planner, as monta-planner requires unless it runs with --insecure:
# PEM files named by these variables (the same files as montactl's --tls_* flags; a
# training pod mounts a reader certificate). Without them the channel is plaintext.
ENV_TLS_FILES = ("MONTA_TLS_CA_FILE", "MONTA_TLS_CERT_FILE", "MONTA_TLS_KEY_FILE")


def stubs() -> SimpleNamespace:
    """The generated modules: .planner_pb2, .planner_pb2_grpc, .strategy_pb2."""
    try:
        from monta._proto import planner_pb2, planner_pb2_grpc, strategy_pb2
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("monta._proto"):
            raise PlanError(
                "monta: the gRPC stubs (monta._proto) are missing: this monta was imported "
                "from a source tree, not an installed package; install it with "
                "`pip install --no-build-isolation ./python` (repository root)") from None
        raise PlanError(f"monta: the gRPC stubs need the module {e.name} (Debian: "
                        "python3-grpcio, python3-protobuf)") from None
    return SimpleNamespace(planner_pb2=planner_pb2, planner_pb2_grpc=planner_pb2_grpc,
                           strategy_pb2=strategy_pb2)


def message(cls, value: Any, what: str):
    """`value` (None, a message of `cls`, or a dict in the proto's JSON form) as a `cls`."""
    from google.protobuf import json_format
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    try:
        return json_format.ParseDict(value, cls())
    except json_format.ParseError as e:
        raise PlanError(f"{what}: {e}") from None


def enum_name(msg, field_name: str) -> str:
    """The enum value's own name, wherever in the contract the enum is declared."""
    enum = msg.DESCRIPTOR.fields_by_name[field_name].enum_type
    return enum.values_by_number[getattr(msg, field_name)].name


# A planner's replicas (issue 20 item 6), as montactl and the agent take them
# (common/replicas/endpoints.h, mirrored here): a list of gRPC targets; a call answered
# UNAVAILABLE (the replica is down, or a follower refusing with "not the leader (leader:
# X)") is made again on the leader it named when listed, else on the next target. A
# "dns:" target that resolves to several replicas (a headless Service) is called with
# gRPC's round_robin policy, DNS_ATTEMPTS times at most, each call on the next address.
DNS_ATTEMPTS = 3
_LEADER_IS = "not the leader (leader: "


def endpoints(planner: Union[str, Sequence[str]]) -> List[str]:
    """The planner's targets: a list (or tuple) of them, or one string, comma-separated
    ("a:7400,b:7400"). PlanError when none is given or one holds a space."""
    parts = planner.split(",") if isinstance(planner, str) else list(planner)
    targets = []
    for part in parts:
        if not isinstance(part, str):
            raise PlanError(f"planner: expected gRPC targets (host:port) as strings, got a "
                            f"{type(part).__name__}")
        part = part.strip()
        if not part:
            continue
        if any(c.isspace() or not c.isprintable() for c in part):
            raise PlanError("planner: expected comma-separated gRPC targets (host:port), got "
                            "one with a space or control character in it")
        targets.append(part)
    if not targets:
        raise PlanError("planner: expected a gRPC target (host:port), or several, got none")
    return targets


def leader_named(message: str) -> str:
    """The leader a follower names in its refusal ("not the leader (leader: X)"), else ""."""
    at = (message or "").find(_LEADER_IS)
    if at < 0:
        return ""
    rest = message[at + len(_LEADER_IS):]
    end = rest.find(")")
    leader = rest[:end] if end >= 0 else ""
    return "" if leader == "unknown" else leader


def attempts(targets: Sequence[str]) -> int:
    """Calls one request may take: one per target (DNS_ATTEMPTS per "dns:" name), plus
    one for a named leader."""
    return 1 + sum(DNS_ATTEMPTS if t.startswith("dns:") else 1 for t in targets)


def next_target(targets: Sequence[str], at: int, message: str) -> int:
    """After targets[at] answered UNAVAILABLE with `message`: the index to call next."""
    leader = leader_named(message)
    if leader and leader != targets[at] and leader in targets:
        return targets.index(leader)
    return (at + 1) % len(targets)


def channel(address: str):
    """A channel to the planner: mutual TLS when ENV_TLS_FILES are set, else plaintext;
    round robin over a "dns:" target's addresses."""
    import grpc
    options = [("grpc.lb_policy_name", "round_robin")] if address.startswith("dns:") else []
    given = [name for name in ENV_TLS_FILES if os.environ.get(name)]
    if not given:
        return grpc.insecure_channel(address, options=options)
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
        root_certificates=ca, private_key=key, certificate_chain=cert), options=options)


def get_strategy_reply(planner: Union[str, Sequence[str]], job: Any, placement: Any,
                       options: Any, timeout_s: float) -> Tuple[Any, Any]:
    """GetStrategy at the planner (one target, a list of its replicas, or a comma string;
    see endpoints): (request, reply) as messages, for callers that want the whole answer
    (every candidate, the evidence); monta.Plan.request wraps it. `timeout_s` bounds each
    call; an UNAVAILABLE one is made again on the next replica (next_target)."""
    import grpc
    targets = endpoints(planner)
    pb = stubs()
    request = pb.strategy_pb2.StrategyRequest(
        job=message(pb.strategy_pb2.MoeJob, job, "job"),
        placement=message(pb.strategy_pb2.Placement, placement, "placement"),
        options=message(pb.strategy_pb2.StrategyOptions, options, "options"))
    channels = {}  # one per target: round robin moves on within a "dns:" target's
    refused = []
    at = 0
    try:
        for _ in range(attempts(targets)):
            address = targets[at]
            if address not in channels:
                channels[address] = channel(address)
            stub = pb.planner_pb2_grpc.PlannerStub(channels[address])
            try:
                return request, stub.GetStrategy(request, timeout=timeout_s)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise PlanError(f"GetStrategy at {address}: {e.code().name}: "
                                    f"{e.details()}") from None
                refused.append(f"{address}: {e.details()}")
                at = next_target(targets, at, e.details())
    finally:
        for chan in channels.values():
            chan.close()
    raise PlanError(f"GetStrategy: UNAVAILABLE at every replica tried ({'; '.join(refused)})")
