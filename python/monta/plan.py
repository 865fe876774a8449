"""The plan a training job runs: from the admission webhook's env, or from the planner.

The admission webhook (server/admission/admission_handler.cc, DecisionEnv) injects:

  MONTA_STRATEGY                          flat | tp_dedup | tp_dedup_pipelined |
                                          hierarchical | expert_overlap
  MONTA_NUM_CHUNKS                        K_eff, an integer >= 1
  MONTA_PREDICTED_ALLTOALL_SECONDS        per MoE layer, forward + backward ("%.6g")
  MONTA_PREDICTED_STEP_ALLTOALL_SECONDS   per optimizer step ("%.6g")
  MONTA_SPEEDUP_OVER_FLAT                 "%.6g"
  MONTA_EVIDENCE_SOURCE                   measured | profile | mixed
  MONTA_EXPERT_LAYOUT                     tensor_parallel | not_tensor_parallel: the expert
                                          layout the plan was priced in (docs/MODEL.md §4)
  MONTA_DECISION_ID                       the decision's UUID

The webhook does not say which parallel sizes the plan is for; a launcher may add them (or
the pod spec may, through the downward API), and then a plan made for other sizes is
refused:

  MONTA_WORLD_SIZE, MONTA_TENSOR_PARALLEL_SIZE, MONTA_EXPERT_PARALLEL_SIZE,
  MONTA_GPUS_PER_NODE                     integers >= 1
  MONTA_MOE_SPEC                          the monta.io/moe annotation (JSON with "job" and
                                          "placement"), e.g. from the downward API
"""

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from monta import rpc
from monta.errors import PlanError

LOG = logging.getLogger("monta")

FLAT = "flat"
TP_DEDUP = "tp_dedup"
TP_DEDUP_PIPELINED = "tp_dedup_pipelined"
HIERARCHICAL = "hierarchical"
EXPERT_OVERLAP = "expert_overlap"
STRATEGIES = (FLAT, TP_DEDUP, TP_DEDUP_PIPELINED, HIERARCHICAL, EXPERT_OVERLAP)
# Strategies whose K is meaningful; the others run with K = 1.
CHUNKED = (TP_DEDUP_PIPELINED, EXPERT_OVERLAP)

# How the experts sit on the tensor-parallel (TP) ranks (monta.v1.ExpertLayout), which
# decides what dispatch and combine compute (docs/MODEL.md section 4, python/README.md):
# tensor-parallel experts see every token (each op is drop -> AllToAll -> gather, its own
# adjoint); whole experts on every TP rank see this TP rank's 1/t of the capacity (dispatch
# = drop -> AllToAll, combine = AllToAll -> gather, DeepSpeed's default path).
TENSOR_PARALLEL = "tensor_parallel"
NOT_TENSOR_PARALLEL = "not_tensor_parallel"
EXPERT_LAYOUTS = (TENSOR_PARALLEL, NOT_TENSOR_PARALLEL)
# What the planner prices when a job does not say (DeepSpeed's default,
# enable_expert_tensor_parallelism=False; docs/MODEL.md section 4, "The default"), and
# so what a plan that does not say runs.
DEFAULT_EXPERT_LAYOUT = NOT_TENSOR_PARALLEL

ENV_STRATEGY = "MONTA_STRATEGY"
ENV_NUM_CHUNKS = "MONTA_NUM_CHUNKS"
ENV_PREDICTED_LAYER = "MONTA_PREDICTED_ALLTOALL_SECONDS"
ENV_PREDICTED_STEP = "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS"
ENV_SPEEDUP = "MONTA_SPEEDUP_OVER_FLAT"
ENV_EVIDENCE = "MONTA_EVIDENCE_SOURCE"
ENV_EXPERT_LAYOUT = "MONTA_EXPERT_LAYOUT"
ENV_DECISION_ID = "MONTA_DECISION_ID"
ENV_WORLD_SIZE = "MONTA_WORLD_SIZE"
ENV_TP_SIZE = "MONTA_TENSOR_PARALLEL_SIZE"
ENV_EP_SIZE = "MONTA_EXPERT_PARALLEL_SIZE"
ENV_GPUS_PER_NODE = "MONTA_GPUS_PER_NODE"
ENV_MOE_SPEC = "MONTA_MOE_SPEC"

# Everything the webhook injects, in its order.
INJECTED = (ENV_STRATEGY, ENV_NUM_CHUNKS, ENV_PREDICTED_LAYER, ENV_PREDICTED_STEP,
            ENV_SPEEDUP, ENV_EVIDENCE, ENV_EXPERT_LAYOUT, ENV_DECISION_ID)
LAYOUT = (ENV_WORLD_SIZE, ENV_TP_SIZE, ENV_EP_SIZE, ENV_GPUS_PER_NODE, ENV_MOE_SPEC)

# The default-layout line is logged once per process, not per AllToAll.
_DEFAULT_LOGGED: List[bool] = []

_DECISION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def _short_name(value, variable: str, prefix: str, names, what: str) -> str:
    """A contract enum value in any spelling (short or proto name, any case, spaces around)
    -> its lower-case short name, or a PlanError naming `variable` (`value` cut short)."""
    expected = f"expected one of {', '.join(names)} (or {prefix.upper()}*)"
    if not isinstance(value, str):
        raise PlanError(f"{variable}={value!r:.64}: expected {what} (a string), {expected}")
    name = value.strip().lower()
    if name.startswith(prefix):
        name = name[len(prefix):]
    if name not in names:
        raise PlanError(f"{variable}={value[:64]!r}: unknown {what}; {expected}")
    return name


def normalize_strategy(value: str, variable: str = ENV_STRATEGY) -> str:
    """"tp_dedup", "TP_DEDUP", " tp_dedup " or the proto enum name "STRATEGY_KIND_TP_DEDUP"
    -> "tp_dedup"; anything else is a PlanError naming `variable`."""
    return _short_name(value, variable, "strategy_kind_", STRATEGIES, "strategy")


def normalize_expert_layout(value: Optional[str], variable: str) -> Optional[str]:
    """"tensor_parallel", "NOT_TENSOR_PARALLEL", " tensor_parallel " or the proto enum name
    "EXPERT_LAYOUT_TENSOR_PARALLEL" -> the short name; None, "unspecified" or
    "EXPERT_LAYOUT_UNSPECIFIED" (the planner did not say) -> None; anything else is a
    PlanError naming `variable`."""
    if value is None:
        return None
    name = _short_name(value, variable, "expert_layout_", EXPERT_LAYOUTS + ("unspecified",),
                       "expert layout")
    return None if name == "unspecified" else name


def effective_chunks(rows: int, chunks: int) -> int:
    """K_eff = ceil(n / ceil(n/K)): the pieces a split of n rows into ceil(n/K) really yields."""
    if rows <= 0:
        return 1
    k = max(1, min(chunks, rows))
    return -(-rows // -(-rows // k))


# The chunk rule is common/schedule's (the model prices it, the agent runs it); the golden
# vectors in common/schedule/testdata/golden_chunks.tsv hold this copy to it
# (python/tests/golden_chunks_test.py).
def rows_per_tp_rank(rows: int, tp: int) -> int:
    """Rows each TP rank keeps of a capacity axis padded up to a multiple of t: ceil(C/t)."""
    return -(-rows // max(1, tp)) if rows > 0 else 0


def chunk_rows(rows: int, chunks: int) -> List[Tuple[int, int]]:
    """(first row, rows) of each of the effective_chunks(rows, chunks) pieces, in order: pieces
    of ceil(rows/K_eff) rows, the last one shorter; empty for no rows."""
    if rows <= 0:
        return []
    size = -(-rows // effective_chunks(rows, chunks))
    return [(s, min(size, rows - s)) for s in range(0, rows, size)]


@dataclass(frozen=True)
class Layout:
    """The parallel layout a plan was made for; None = not stated (not checked)."""
    world_size: Optional[int] = None
    tensor_parallel_size: Optional[int] = None
    expert_parallel_size: Optional[int] = None
    gpus_per_node: Optional[int] = None
    # Which variable (or field) each size came from, for error messages.
    sources: Dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Plan:
    strategy: str = FLAT
    num_chunks: int = 1
    decision_id: str = ""
    predicted_alltoall_seconds_per_layer: Optional[float] = None
    predicted_forward_seconds_per_layer: Optional[float] = None
    predicted_backward_seconds_per_layer: Optional[float] = None
    predicted_step_alltoall_seconds: Optional[float] = None
    speedup_over_flat: Optional[float] = None
    evidence_source: str = ""
    # "env", "planner" or "default".
    origin: str = "default"
    layout: Layout = field(default_factory=Layout)
    # The expert layout the plan was priced in (TENSOR_PARALLEL or NOT_TENSOR_PARALLEL), or
    # None when it does not say (an old webhook, no plan): then dispatch / combine run the
    # layout the groups or the call name, else DEFAULT_EXPERT_LAYOUT (with a logged line).
    expert_layout: Optional[str] = None
    # From the planner (Plan.request): every feasible candidate as a Plan, best first (the
    # chosen one first), with its predicted times; empty for plans from the env or default.
    candidates: Tuple["Plan", ...] = field(default=(), compare=False, repr=False)
    # From the planner on named nodes with a fabric (docs/MODEL.md section 12): the job's
    # nodes in the advised rank order (rank r on rank_order[r // gpus_per_node]), the node
    # names the request gave, and the predicted flat dispatch AllToAll with each order.
    # Empty / None otherwise. Give node_order(...) to MoeGroups.build to run in that order.
    rank_order: Tuple[str, ...] = field(default=(), compare=False)
    given_nodes: Tuple[str, ...] = field(default=(), compare=False)
    predicted_given_dispatch_seconds: Optional[float] = field(default=None, compare=False)
    predicted_advised_dispatch_seconds: Optional[float] = field(default=None, compare=False)

    def node_order(self) -> Optional[List[int]]:
        """The advised order as positions in the given one: node_order()[i] is the index
        (in the request's node_names, i.e. the launcher's node rank) of the node that holds
        the advised order's i-th slot; None when the planner gave no advice."""
        if not self.rank_order:
            return None
        return advised_node_order(self.given_nodes, self.rank_order)

    def __post_init__(self):
        # Every constructor (Plan(...), dataclasses.replace, from_env, request) lands here:
        # the strategy is stored in its one spelling, so the AllToAll runs what was asked.
        object.__setattr__(self, "strategy", normalize_strategy(self.strategy, "Plan.strategy"))
        object.__setattr__(self, "expert_layout",
                           normalize_expert_layout(self.expert_layout, "Plan.expert_layout"))
        if not isinstance(self.num_chunks, int) or isinstance(self.num_chunks, bool) or \
                self.num_chunks < 1:
            raise PlanError(f"Plan.num_chunks={self.num_chunks!r}: expected an integer >= 1")
        if self.num_chunks > 1 and self.strategy not in CHUNKED:
            raise PlanError(f"Plan.num_chunks={self.num_chunks}: only {' and '.join(CHUNKED)} "
                            f"run in chunks; {self.strategy} runs with num_chunks=1")

    def __str__(self):
        k = f"(K={self.num_chunks})" if self.strategy in CHUNKED else ""
        did = f" decision {self.decision_id}" if self.decision_id else ""
        experts = f", experts {self.expert_layout}" if self.expert_layout else ""
        return f"{self.strategy}{k}{experts} from {self.origin}{did}"

    def strategy_source(self) -> str:
        """Where the strategy came from, for error messages: the variable or the field."""
        return ENV_STRATEGY if self.origin == "env" else "Plan.strategy"

    def expert_layout_source(self) -> str:
        """Where the expert layout came from, for error messages."""
        return {"env": ENV_EXPERT_LAYOUT, "planner": "StrategyReply.expert_layout"}.get(
            self.origin, "Plan.expert_layout")

    @property
    def expert_layout_or_default(self) -> str:
        """The layout this plan runs when neither the groups nor the call name one."""
        return self.expert_layout or DEFAULT_EXPERT_LAYOUT

    # ----- constructors -----

    @staticmethod
    def flat(reason: str = "") -> "Plan":
        """Flat, with no expert layout stated: the groups' or the call's runs, else
        DEFAULT_EXPERT_LAYOUT."""
        if reason:
            LOG.warning("monta: no plan (%s); using the flat AllToAll, with the expert layout "
                        "the groups or the call name (else %s, the planner's default)", reason,
                        DEFAULT_EXPERT_LAYOUT)
        return Plan()

    @staticmethod
    def from_env(environ: Optional[Mapping[str, str]] = None,
                 default_flat: bool = True) -> "Plan":
        """The plan the admission webhook injected.

        Without MONTA_STRATEGY (and no other MONTA_ plan variable): flat with a logged
        warning, or PlanError when default_flat is False. Malformed values raise PlanError
        naming the variable."""
        env = os.environ if environ is None else environ
        present = [v for v in INJECTED if v in env]
        if ENV_STRATEGY not in env:
            if present:
                raise PlanError(f"{ENV_STRATEGY}: missing, but {', '.join(present)} set "
                                "(an incomplete admission patch?)")
            if not default_flat:
                raise PlanError(f"{ENV_STRATEGY}: not set (no admission decision)")
            return Plan.flat(f"{ENV_STRATEGY} not set")
        strategy = normalize_strategy(env[ENV_STRATEGY])
        chunks = _int_var(env, ENV_NUM_CHUNKS, default=1)
        if chunks > 1 and strategy not in CHUNKED:
            LOG.warning("monta: %s=%d ignored for strategy %s (not chunked)", ENV_NUM_CHUNKS,
                        chunks, strategy)
            chunks = 1
        decision_id = env.get(ENV_DECISION_ID, "")
        if ENV_DECISION_ID in env and not _DECISION_ID.fullmatch(decision_id):
            raise PlanError(f"{ENV_DECISION_ID}={decision_id!r}: expected 1..128 characters of "
                            "[A-Za-z0-9._:-] (a UUID)")
        evidence = env.get(ENV_EVIDENCE, "")
        if ENV_EVIDENCE in env and not _TOKEN.fullmatch(evidence):
            raise PlanError(f"{ENV_EVIDENCE}={evidence!r}: expected a word such as measured, "
                            "profile or mixed")
        expert_layout = normalize_expert_layout(env.get(ENV_EXPERT_LAYOUT), ENV_EXPERT_LAYOUT)
        if expert_layout is None:
            LOG.warning("monta: %s not set (a webhook older than the expert layout?): the plan "
                        "does not say which expert layout it was priced in; running the "
                        "groups' or the call's, else %s (the planner's default)",
                        ENV_EXPERT_LAYOUT, DEFAULT_EXPERT_LAYOUT)
        return Plan(
            strategy=strategy,
            num_chunks=chunks,
            decision_id=decision_id,
            predicted_alltoall_seconds_per_layer=_float_var(env, ENV_PREDICTED_LAYER),
            predicted_step_alltoall_seconds=_float_var(env, ENV_PREDICTED_STEP),
            speedup_over_flat=_float_var(env, ENV_SPEEDUP),
            evidence_source=evidence,
            origin="env",
            layout=_layout_from_env(env),
            expert_layout=expert_layout,
        )

    @staticmethod
    def request(planner_address: Union[str, Sequence[str]], job: Any, placement: Any = None,
                options: Any = None, timeout_s: float = 10.0) -> "Plan":
        """Asks the planner (GetStrategy over gRPC) for `job`.

        planner_address: host:port, or a planner's replicas as a list or a comma string
        ("a:7400,b:7400,c:7400"): a replica that is down or refuses UNAVAILABLE is passed
        over for the leader it named, else the next (monta.rpc.get_strategy_reply; a
        "dns:///name:port" target is called round robin). job / placement / options: dicts
        in the proto's JSON form (field names as in proto/monta/v1/strategy.proto) or the
        messages themselves. Raises PlanError when the planner refuses the job or no
        replica can be reached."""
        request, reply = rpc.get_strategy_reply(planner_address, job, placement, options,
                                                timeout_s)
        shown = planner_address if isinstance(planner_address, str) \
            else ",".join(planner_address)
        return plan_from_reply(shown, request, reply)

    @staticmethod
    def resolve(planner_address: Union[str, Sequence[str], None] = None, job: Any = None,
                placement: Any = None, environ: Optional[Mapping[str, str]] = None,
                timeout_s: float = 10.0) -> "Plan":
        """The env's plan; else the planner's (when an address and a job are given); else
        flat, with a logged warning."""
        env = os.environ if environ is None else environ
        if ENV_STRATEGY in env:
            return Plan.from_env(env)
        if planner_address and job is not None:
            try:
                return Plan.request(planner_address, job, placement, timeout_s=timeout_s)
            except PlanError as e:
                return Plan.flat(f"planner {planner_address}: {e}")
        return Plan.from_env(env)

    def candidate(self, strategy: str) -> Optional["Plan"]:
        """The planner's best candidate of `strategy` (its K and predicted times), or None
        when the planner did not offer it (infeasible, not allowed, or no planner reply)."""
        name = normalize_strategy(strategy, "Plan.candidate(strategy)")
        return next((c for c in self.candidates if c.strategy == name), None)

    # ----- checks -----

    def chunks_for(self, rows: int) -> int:
        """K_eff for a split of `rows` capacity rows (1 unless the strategy is chunked)."""
        if self.strategy not in CHUNKED:
            return 1
        return effective_chunks(rows, self.num_chunks)

    def check_layout(self, world_size: int, tensor_parallel_size: int,
                     expert_parallel_size: int, gpus_per_node: Optional[int]) -> None:
        """Refuses a plan made for another layout than the process groups'."""
        actual = {"world_size": world_size, "tensor_parallel_size": tensor_parallel_size,
                  "expert_parallel_size": expert_parallel_size, "gpus_per_node": gpus_per_node}
        for name, have in actual.items():
            want = getattr(self.layout, name)
            if want is None or have is None or want == have:
                continue
            source = self.layout.sources.get(name, name)
            raise PlanError(f"{source}={want}: the plan ({self}) was made for {name} {want}, "
                            f"but the process groups have {name} {have}; re-plan for this "
                            "layout")

    def check_expert_layout(self, named: Optional[str], source: str) -> None:
        """Refuses running experts `named` (what `source`, the groups or the call, says the
        job runs; None = not said) with a plan priced for the other layout."""
        if self.expert_layout and named and named != self.expert_layout:
            wanted = "true" if named == TENSOR_PARALLEL else "false"
            raise PlanError(
                f"{self.expert_layout_source()}={self.expert_layout}: the plan ({self}) was "
                f"priced for experts {self.expert_layout}, but {source} runs experts {named}: "
                f"re-plan with job.experts_tensor_parallel={wanted}, or run the layout the "
                "plan was made for")

    def expert_layout_for(self, named: Optional[str], source: str) -> str:
        """The expert layout to run: `named` (see check_expert_layout) or the plan's, which
        must agree when both say; else DEFAULT_EXPERT_LAYOUT, logged once per process."""
        self.check_expert_layout(named, source)
        layout = named or self.expert_layout
        if layout is None:
            layout = DEFAULT_EXPERT_LAYOUT
            if not _DEFAULT_LOGGED:
                _DEFAULT_LOGGED.append(True)
                LOG.warning("monta: neither the plan (%s) nor the groups nor the call name the "
                            "expert layout: running %s, the planner's default (docs/MODEL.md "
                            "section 4); name it with MoeGroups.build(expert_layout=...)", self,
                            layout)
        return layout

    def with_layout(self, sources: Optional[Dict[str, str]] = None, **sizes) -> "Plan":
        """This plan, stated to be for the given sizes (checked by MoeGroups.check)."""
        named = {k: f"Plan.layout.{k}" for k in sizes}
        named.update(sources or {})
        return replace(self, layout=Layout(sources=named, **sizes))


def advised_node_order(given_nodes: Sequence[str], advised_nodes: Sequence[str]) -> List[int]:
    """Positions in `given_nodes` (the launcher's node ranks) of the nodes of the advised
    rank order, for MoeGroups.build(node_order=...). PlanError unless both name the same
    nodes once each."""
    given, advised = list(given_nodes), list(advised_nodes)
    if sorted(given) != sorted(advised) or len(set(given)) != len(given):
        raise PlanError(f"rank order: the advised nodes {advised[:16]} are not the given nodes "
                        f"{given[:16]} once each")
    index = {name: i for i, name in enumerate(given)}
    return [index[name] for name in advised]


def _candidate_plan(candidate, evidence: str, expert_layout: Optional[str], what: str) -> Plan:
    strategy = normalize_strategy(rpc.enum_name(candidate, "kind"), what)
    fwd, bwd = candidate.forward_seconds_per_layer, candidate.backward_seconds_per_layer
    chunks = max(1, candidate.chunks_effective) if strategy in CHUNKED else 1
    return Plan(strategy=strategy, num_chunks=chunks, expert_layout=expert_layout,
                predicted_forward_seconds_per_layer=fwd,
                predicted_backward_seconds_per_layer=bwd,
                predicted_alltoall_seconds_per_layer=fwd + bwd,
                speedup_over_flat=candidate.speedup_over_flat or None,
                evidence_source=evidence, origin="planner")


def plan_from_reply(address: str, request, reply) -> Plan:
    """GetStrategy's (request, reply) messages (monta.rpc.get_strategy_reply) as a Plan: the
    chosen candidate, stated to be for the request's layout; `candidates` holds every
    feasible one (best first), so a caller can see what the planner predicted for the
    strategies it did not choose."""
    chosen = reply.chosen
    if chosen.kind == 0:  # STRATEGY_KIND_UNSPECIFIED
        raise PlanError(f"GetStrategy at {address}: no strategy chosen (none feasible)")
    evidence = rpc.enum_name(reply.evidence, "origin").lower()
    evidence = evidence[len("evidence_source_"):] if evidence.startswith("evidence_source_") \
        else evidence
    if evidence == "unspecified":
        evidence = ""
    # Every candidate was priced in the reply's layout; 0 (a planner older than the field)
    # says nothing.
    try:
        layout_name = rpc.enum_name(reply, "expert_layout")
    except KeyError:  # a value this copy of the contract does not know
        raise PlanError(f"GetStrategy at {address}: expert_layout={reply.expert_layout}: an "
                        "expert layout this monta does not know; upgrade monta") from None
    expert_layout = normalize_expert_layout(layout_name,
                                            f"GetStrategy at {address}: expert_layout")
    if expert_layout is None:
        LOG.warning("monta: GetStrategy at %s did not say which expert layout it priced (an "
                    "older planner?); running the groups' or the call's, else %s", address,
                    DEFAULT_EXPERT_LAYOUT)
    candidates = tuple(_candidate_plan(c, evidence, expert_layout,
                                       f"GetStrategy reply candidates[{i}].kind")
                       for i, c in enumerate(reply.candidates) if c.feasible)
    plan = replace(_candidate_plan(chosen, evidence, expert_layout,
                                   "GetStrategy reply chosen.kind"),
                   candidates=candidates)
    if reply.HasField("rank_order") and reply.rank_order.nodes:
        advice = reply.rank_order
        plan = replace(plan, rank_order=tuple(advice.nodes),
                       given_nodes=tuple(request.placement.node_names),
                       predicted_given_dispatch_seconds=advice.given_dispatch_seconds,
                       predicted_advised_dispatch_seconds=advice.advised_dispatch_seconds)
    sources = {"world_size": "job.world_size", "tensor_parallel_size": "job.tensor_parallel_size",
               "expert_parallel_size": "job.expert_parallel_size",
               "gpus_per_node": "placement.gpus_per_node"}
    return plan.with_layout(sources=sources,
                            world_size=request.job.world_size or None,
                            tensor_parallel_size=request.job.tensor_parallel_size or None,
                            expert_parallel_size=request.job.expert_parallel_size or None,
                            gpus_per_node=request.placement.gpus_per_node or None)


def _int_var(env: Mapping[str, str], name: str, default: Optional[int] = None,
             minimum: int = 1) -> Optional[int]:
    if name not in env:
        return default
    text = env[name].strip()
    if not re.fullmatch(r"[+]?\d{1,9}", text):
        raise PlanError(f"{name}={env[name]!r}: expected an integer >= {minimum}")
    value = int(text)
    if value < minimum:
        raise PlanError(f"{name}={env[name]!r}: expected an integer >= {minimum}")
    return value


def _float_var(env: Mapping[str, str], name: str) -> Optional[float]:
    if name not in env:
        return None
    try:
        value = float(env[name])
    except ValueError:
        raise PlanError(f"{name}={env[name]!r}: expected a number") from None
    if not math.isfinite(value) or value < 0:
        raise PlanError(f"{name}={env[name]!r}: expected a finite number >= 0")
    return value


def _layout_from_env(env: Mapping[str, str]) -> Layout:
    sizes: Dict[str, Optional[int]] = {}
    sources: Dict[str, str] = {}
    if ENV_MOE_SPEC in env:
        spec_sizes = _layout_from_spec(env[ENV_MOE_SPEC])
        for name, value in spec_sizes.items():
            where = "placement" if name == "gpus_per_node" else "job"
            sizes[name] = value
            sources[name] = f"{ENV_MOE_SPEC} ({where}.{name})"
    for name, var in (("world_size", ENV_WORLD_SIZE), ("tensor_parallel_size", ENV_TP_SIZE),
                      ("expert_parallel_size", ENV_EP_SIZE),
                      ("gpus_per_node", ENV_GPUS_PER_NODE)):
        value = _int_var(env, var)
        if value is None:
            continue
        if name in sizes and sizes[name] != value:
            raise PlanError(f"{var}={value} contradicts {sources[name]}={sizes[name]}")
        sizes[name] = value
        sources[name] = var
    return Layout(sources=sources, **sizes)


def _layout_from_spec(text: str) -> Dict[str, int]:
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise PlanError(f"{ENV_MOE_SPEC}: not valid JSON ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("job", {}), dict):
        raise PlanError(f"{ENV_MOE_SPEC}: expected a JSON object with \"job\" (the monta.io/moe "
                        "annotation)")
    job = spec.get("job", {})
    placement = spec.get("placement") or {}
    out = {}
    for name, where in (("world_size", job), ("tensor_parallel_size", job),
                        ("expert_parallel_size", job), ("gpus_per_node", placement)):
        if name not in where:
            continue
        value = where[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PlanError(f"{ENV_MOE_SPEC}: {name}={value!r}: expected an integer >= 1")
        out[name] = value
    return out
