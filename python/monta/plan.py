"""The plan a training job runs: from the admission webhook's env, or from the planner.

The admission webhook (server/admission/admission_handler.cc, DecisionEnv) injects:

  MONTA_STRATEGY                          flat | tp_dedup | tp_dedup_pipelined |
                                          hierarchical | expert_overlap
  MONTA_NUM_CHUNKS                        K_eff, an integer >= 1
  MONTA_PREDICTED_ALLTOALL_SECONDS        per MoE layer, forward + backward ("%.6g")
  MONTA_PREDICTED_STEP_ALLTOALL_SECONDS   per optimizer step ("%.6g")
  MONTA_SPEEDUP_OVER_FLAT                 "%.6g"
  MONTA_EVIDENCE_SOURCE                   measured | profile | mixed
  MONTA_DECISION_ID                       the decision's UUID

The webhook does not say which layout the plan is for; a launcher may add it (or the pod
spec may, through the downward API), and then a plan made for another layout is refused:

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
from typing import Any, Dict, List, Mapping, Optional, Tuple

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

ENV_STRATEGY = "MONTA_STRATEGY"
ENV_NUM_CHUNKS = "MONTA_NUM_CHUNKS"
ENV_PREDICTED_LAYER = "MONTA_PREDICTED_ALLTOALL_SECONDS"
ENV_PREDICTED_STEP = "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS"
ENV_SPEEDUP = "MONTA_SPEEDUP_OVER_FLAT"
ENV_EVIDENCE = "MONTA_EVIDENCE_SOURCE"
ENV_DECISION_ID = "MONTA_DECISION_ID"
ENV_WORLD_SIZE = "MONTA_WORLD_SIZE"
ENV_TP_SIZE = "MONTA_TENSOR_PARALLEL_SIZE"
ENV_EP_SIZE = "MONTA_EXPERT_PARALLEL_SIZE"
ENV_GPUS_PER_NODE = "MONTA_GPUS_PER_NODE"
ENV_MOE_SPEC = "MONTA_MOE_SPEC"

# Everything the webhook injects, in its order.
INJECTED = (ENV_STRATEGY, ENV_NUM_CHUNKS, ENV_PREDICTED_LAYER, ENV_PREDICTED_STEP,
            ENV_SPEEDUP, ENV_EVIDENCE, ENV_DECISION_ID)
LAYOUT = (ENV_WORLD_SIZE, ENV_TP_SIZE, ENV_EP_SIZE, ENV_GPUS_PER_NODE, ENV_MOE_SPEC)

_DECISION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def normalize_strategy(value: str, variable: str = ENV_STRATEGY) -> str:
    """"tp_dedup", "TP_DEDUP", " tp_dedup " or the proto enum name "STRATEGY_KIND_TP_DEDUP"
    -> "tp_dedup"; anything else is a PlanError naming `variable`."""
    if not isinstance(value, str):
        raise PlanError(f"{variable}={value!r}: expected a strategy name (a string), one of "
                        f"{', '.join(STRATEGIES)}")
    name = value.strip().lower()
    if name.startswith("strategy_kind_"):
        name = name[len("strategy_kind_"):]
    if name not in STRATEGIES:
        raise PlanError(f"{variable}={value!r}: unknown strategy; expected one of "
                        f"{', '.join(STRATEGIES)}")
    return name


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
    # From the planner (Plan.request): every feasible candidate as a Plan, best first (the
    # chosen one first), with its predicted times; empty for plans from the env or default.
    candidates: Tuple["Plan", ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        # Every constructor (Plan(...), dataclasses.replace, from_env, request) lands here:
        # the strategy is stored in its one spelling, so the AllToAll runs what was asked.
        object.__setattr__(self, "strategy", normalize_strategy(self.strategy, "Plan.strategy"))
        if not isinstance(self.num_chunks, int) or isinstance(self.num_chunks, bool) or \
                self.num_chunks < 1:
            raise PlanError(f"Plan.num_chunks={self.num_chunks!r}: expected an integer >= 1")
        if self.num_chunks > 1 and self.strategy not in CHUNKED:
            raise PlanError(f"Plan.num_chunks={self.num_chunks}: only {' and '.join(CHUNKED)} "
                            f"run in chunks; {self.strategy} runs with num_chunks=1")

    def __str__(self):
        k = f"(K={self.num_chunks})" if self.strategy in CHUNKED else ""
        did = f" decision {self.decision_id}" if self.decision_id else ""
        return f"{self.strategy}{k} from {self.origin}{did}"

    def strategy_source(self) -> str:
        """Where the strategy came from, for error messages: the variable or the field."""
        return ENV_STRATEGY if self.origin == "env" else "Plan.strategy"

    # ----- constructors -----

    @staticmethod
    def flat(reason: str = "") -> "Plan":
        if reason:
            LOG.warning("monta: no plan (%s); using the flat AllToAll", reason)
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
        )

    @staticmethod
    def request(planner_address: str, job: Any, placement: Any = None,
                options: Any = None, timeout_s: float = 10.0) -> "Plan":
        """Asks the planner (GetStrategy over gRPC) for `job`.

        job / placement / options: dicts in the proto's JSON form (field names as in
        proto/monta/v1/strategy.proto) or the messages themselves. Raises PlanError when the
        planner refuses the job or cannot be reached."""
        request, reply = rpc.get_strategy_reply(planner_address, job, placement, options,
                                                timeout_s)
        return plan_from_reply(planner_address, request, reply)

    @staticmethod
    def resolve(planner_address: Optional[str] = None, job: Any = None,
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

    def with_layout(self, sources: Optional[Dict[str, str]] = None, **sizes) -> "Plan":
        """This plan, stated to be for the given sizes (checked by MoeGroups.check)."""
        named = {k: f"Plan.layout.{k}" for k in sizes}
        named.update(sources or {})
        return replace(self, layout=Layout(sources=named, **sizes))


def _candidate_plan(candidate, evidence: str, what: str) -> Plan:
    strategy = normalize_strategy(rpc.enum_name(candidate, "kind"), what)
    fwd, bwd = candidate.forward_seconds_per_layer, candidate.backward_seconds_per_layer
    chunks = max(1, candidate.chunks_effective) if strategy in CHUNKED else 1
    return Plan(strategy=strategy, num_chunks=chunks,
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
