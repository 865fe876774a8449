// A registration storm cut into etcd Txns (server/etcd_store/txn_batch.h):
// N node mutations of distinct nodes, each with a NodeInfo of a GPU node's
// size, through one TxnBatch at etcd's default limits (128 operations,
// 1.5 MiB per request), as EtcdStore::Commit does for the registry's batch.
// Noisy on a shared host: compare ratios, and quote the load.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "server/etcd/client.h"
#include "server/etcd_store/txn_batch.h"

namespace monta::perf {
namespace {

std::vector<store::Mutation> Storm(int nodes) {
  std::vector<store::Mutation> storm(nodes);
  for (int i = 0; i < nodes; ++i) {
    store::Mutation& m = storm[i];
    m.kind = store::Mutation::Kind::kNode;
    m.node.set_name(absl::StrCat("node-", i));
    m.node.set_instance_id(absl::StrCat("instance-", i));
    monta::v1::NodeTopology& topology = *m.node.mutable_topology();
    topology.set_hostname(absl::StrCat("host-", i, ".cluster.local"));
    for (int g = 0; g < 8; ++g) {
      monta::v1::Gpu& gpu = *topology.add_gpus();
      gpu.set_uuid(
          absl::StrCat("GPU-", i, "-", g, "-0000-0000-0000-000000000000"));
      gpu.set_name("NVIDIA H100 80GB HBM3");
    }
  }
  return storm;
}

void BM_RegistrationStorm(benchmark::State& state) {
  const std::vector<store::Mutation> storm =
      Storm(static_cast<int>(state.range(0)));
  std::vector<std::string> values;
  for (const store::Mutation& m : storm) {
    values.push_back(m.node.SerializeAsString());
  }
  const etcd::ClientOptions limits;
  size_t parts = 0;
  for (auto _ : state) {
    etcd_store::TxnBatch batch(static_cast<size_t>(limits.max_txn_ops),
                               limits.max_request_bytes -
                                   etcd::kRaftEnvelopeBytes -
                                   etcd::kTxnFramingBytes);
    for (size_t i = 0; i < storm.size(); ++i) {
      batch.Put(absl::StrCat("/monta/v1/nodes/", storm[i].node.name()),
                values[i]);
      if (!batch.EndMutation(storm[i], i).ok()) {
        state.SkipWithError("EndMutation failed");
        return;
      }
    }
    parts = batch.Finish().size();
  }
  state.counters["txns"] = static_cast<double>(parts);
  state.counters["value_bytes"] = static_cast<double>(values[0].size());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RegistrationStorm)
    ->Arg(1000)
    ->Arg(20000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace monta::perf
