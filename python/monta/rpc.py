"""The planner's gRPC contract (proto/monta/v1) from Python: the stubs, the channel, GetStrategy.

The stubs are generated when the package is built (setup.py) into the private subpackage
monta._proto; nothing is generated or put on sys.path at run time. grpcio and the stubs are
imported on first use, so `import monta` needs neither.
"""

import os
from types import SimpleNamespace
from typing import Any, Tuple

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


def channel(address: str):
    """A channel to the planner: mutual TLS when ENV_TLS_FILES are set, else plaintext."""
    import grpc
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
                       timeout_s: float) -> Tuple[Any, Any]:
    """GetStrategy at `address`: (request, reply) as messages, for callers that want the
    whole answer (every candidate, the evidence); monta.Plan.request wraps it."""
    import grpc
    pb = stubs()
    request = pb.strategy_pb2.StrategyRequest(
        job=message(pb.strategy_pb2.MoeJob, job, "job"),
        placement=message(pb.strategy_pb2.Placement, placement, "placement"),
        options=message(pb.strategy_pb2.StrategyOptions, options, "options"))
    with channel(address) as chan:
        stub = pb.planner_pb2_grpc.PlannerStub(chan)
        try:
            reply = stub.GetStrategy(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise PlanError(f"GetStrategy at {address}: {e.code().name}: {e.details()}") from None
    return request, reply
