// Mutations the store tests commit (the contract suite and the follower's
// tests share them): a node, a curve between nodes, a node removed.
#ifndef MONTA_SERVER_STORE_TEST_MUTATIONS_H_
#define MONTA_SERVER_STORE_TEST_MUTATIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/store/store.h"

namespace monta::store::test_mutations {

inline Mutation Node(const std::string& name,
                     const std::string& hostname = "") {
  Mutation m;
  m.kind = Mutation::Kind::kNode;
  m.node.set_name(name);
  m.node.set_instance_id("i-" + name);
  if (!hostname.empty()) m.node.mutable_topology()->set_hostname(hostname);
  return m;
}

// An inter-node AllToAll curve of 4 ranks with one point.
inline monta::v1::BandwidthCurve Curve(const std::string& task,
                                       uint64_t sequence,
                                       const std::vector<std::string>& nodes = {
                                           "a", "b"}) {
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_scope(monta::v1::SCOPE_INTER_NODE);
  c.set_nranks(4);
  for (const std::string& n : nodes) c.add_nodes(n);
  c.set_task_id(task);
  c.set_sequence(sequence);
  c.add_points()->set_message_bytes(1024);
  return c;
}

inline Mutation CurveAdded(const monta::v1::BandwidthCurve& curve) {
  Mutation m;
  m.kind = Mutation::Kind::kCurve;
  m.curve = curve;
  return m;
}

inline Mutation NodeRemoved(const std::string& name) {
  Mutation m;
  m.kind = Mutation::Kind::kNodeRemoved;
  m.node_name = name;
  return m;
}

}  // namespace monta::store::test_mutations

#endif  // MONTA_SERVER_STORE_TEST_MUTATIONS_H_
