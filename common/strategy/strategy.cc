#include "common/strategy/strategy.h"

namespace monta::strategy {

const char* StrategyName(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kFlat:
      return "flat";
    case StrategyKind::kTpDedup:
      return "tp_dedup";
    case StrategyKind::kTpDedupPipelined:
      return "tp_dedup_pipelined";
    case StrategyKind::kHierarchical:
      return "hierarchical";
    case StrategyKind::kExpertOverlap:
      return "expert_overlap";
  }
  return "unknown";
}

std::optional<StrategyKind> StrategyFromName(absl::string_view name) {
  for (StrategyKind kind : kAllStrategyKinds) {
    if (name == StrategyName(kind)) return kind;
  }
  return std::nullopt;
}

StrategyKind SameScheduleAs(StrategyKind kind, int chunks_effective,
                            bool drops_everywhere) {
  if (kind == StrategyKind::kTpDedupPipelined && chunks_effective <= 1) {
    kind = StrategyKind::kTpDedup;
  }
  if (kind == StrategyKind::kTpDedup && drops_everywhere) {
    kind = StrategyKind::kFlat;
  }
  return kind;
}

}  // namespace monta::strategy
