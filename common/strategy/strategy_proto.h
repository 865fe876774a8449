// The one conversion between strategy::StrategyKind and
// monta.v1.StrategyKind.
#ifndef MONTA_COMMON_STRATEGY_STRATEGY_PROTO_H_
#define MONTA_COMMON_STRATEGY_STRATEGY_PROTO_H_

#include <optional>

#include "common/strategy/strategy.h"
#include "proto/monta/v1/common.pb.h"

namespace monta::strategy {

// The kind of a proto value; nullopt for UNSPECIFIED or a number this build
// does not know.
std::optional<StrategyKind> StrategyFromProto(int value);

monta::v1::StrategyKind StrategyToProto(StrategyKind kind);

}  // namespace monta::strategy

#endif  // MONTA_COMMON_STRATEGY_STRATEGY_PROTO_H_
