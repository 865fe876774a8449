#include "common/proto_names.h"

namespace monta {

std::string NodeStateName(monta::v1::NodeState state) {
  switch (state) {
    case monta::v1::NODE_STATE_ALIVE:
      return "alive";
    case monta::v1::NODE_STATE_STALE:
      return "stale";
    case monta::v1::NODE_STATE_GONE:
      return "gone";
    default:
      return "unknown";
  }
}

}  // namespace monta
