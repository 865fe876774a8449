#include "common/strategy/strategy_proto.h"

namespace monta::strategy {

// A proto renumbering (or a new enumerator here) must fail the build, not
// silently plan the wrong strategy.
static_assert(static_cast<int>(StrategyKind::kFlat) ==
              monta::v1::STRATEGY_KIND_FLAT);
static_assert(static_cast<int>(StrategyKind::kTpDedup) ==
              monta::v1::STRATEGY_KIND_TP_DEDUP);
static_assert(static_cast<int>(StrategyKind::kTpDedupPipelined) ==
              monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
static_assert(static_cast<int>(StrategyKind::kHierarchical) ==
              monta::v1::STRATEGY_KIND_HIERARCHICAL);
static_assert(static_cast<int>(StrategyKind::kExpertOverlap) ==
              monta::v1::STRATEGY_KIND_EXPERT_OVERLAP);

std::optional<StrategyKind> StrategyFromProto(int value) {
  for (StrategyKind kind : kAllStrategyKinds) {
    if (static_cast<int>(kind) == value) return kind;
  }
  return std::nullopt;
}

monta::v1::StrategyKind StrategyToProto(StrategyKind kind) {
  return static_cast<monta::v1::StrategyKind>(kind);
}

}  // namespace monta::strategy
