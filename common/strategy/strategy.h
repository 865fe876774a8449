// The dispatch strategies of the paper (S0..S4) and their names, held once for
// the model, the planner and the agent's benchmark schedules.
//
// Pure C++ and Abseil: no protobuf, so the model may use it. The conversion to
// and from monta.v1.StrategyKind lives at the edge, in strategy_proto.h.
#ifndef MONTA_COMMON_STRATEGY_STRATEGY_H_
#define MONTA_COMMON_STRATEGY_STRATEGY_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace monta::strategy {

// The values are the numbers of monta.v1.StrategyKind (strategy_proto.cc
// asserts it at compile time); 0 (unspecified) has no enumerator because no
// computation can use it.
enum class StrategyKind : int {
  kFlat = 1,              // S0
  kTpDedup = 2,           // S1
  kTpDedupPipelined = 3,  // S2(K)
  kHierarchical = 4,      // S3
  kExpertOverlap = 5,     // S4(K)
};

// Every kind, in the order of the paper.
inline constexpr StrategyKind kAllStrategyKinds[] = {
    StrategyKind::kFlat, StrategyKind::kTpDedup,
    StrategyKind::kTpDedupPipelined, StrategyKind::kHierarchical,
    StrategyKind::kExpertOverlap};

// "flat", "tp_dedup", "tp_dedup_pipelined", "hierarchical", "expert_overlap":
// the proto's short names (common/proto_names.h), so logs, metric labels and
// annotations agree. "unknown" for a value outside the enum.
const char* StrategyName(StrategyKind kind);

// The kind whose StrategyName is `name`; nullopt for any other name.
std::optional<StrategyKind> StrategyFromName(absl::string_view name);

// The simplest kind that runs the same schedule as `kind` cut into
// `chunks_effective` pipeline chunks (docs/MODEL.md §4): tp_dedup_pipelined
// in one chunk is tp_dedup, and where every schedule drops the TP duplicates
// (`drops_everywhere`: one MoE layer whose experts are not tensor-parallel,
// t > 1) tp_dedup is flat. Every other kind is itself. The model prices such
// candidates the same; verify runs and scores them as one (§11).
StrategyKind SameScheduleAs(StrategyKind kind, int chunks_effective,
                            bool drops_everywhere);

}  // namespace monta::strategy

#endif  // MONTA_COMMON_STRATEGY_STRATEGY_H_
