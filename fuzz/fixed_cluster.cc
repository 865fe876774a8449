#include "fuzz/fixed_cluster.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/schedule/schedule.h"

namespace monta::fuzz {
namespace {

monta::v1::RegisterRequest Node(const std::string& name) {
  monta::v1::RegisterRequest request;
  request.set_node_name(name);
  request.set_instance_id(name + "-instance");
  monta::v1::NodeTopology* topology = request.mutable_topology();
  topology->set_hostname(name);
  topology->set_profile_name("a800-hgx");
  for (int i = 0; i < 8; ++i) {
    monta::v1::Gpu* gpu = topology->add_gpus();
    gpu->set_index(i);
    gpu->set_name("NVIDIA A800-SXM4-80GB");
  }
  return request;
}

// T = alpha + share * x / rate over 1 KiB .. 1 GiB, as nccl-tests measures.
monta::v1::BandwidthCurve Curve(const std::vector<std::string>& nodes,
                                int nranks, double link_bytes_per_second) {
  monta::v1::BandwidthCurve curve;
  const int n_nodes = static_cast<int>(nodes.size());
  curve.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  curve.set_scope(n_nodes > 1 ? monta::v1::SCOPE_INTER_NODE
                              : monta::v1::SCOPE_INTRA_NODE);
  curve.set_backend(monta::v1::BACKEND_NCCL);
  curve.set_nranks(nranks);
  curve.set_n_nodes(n_nodes);
  for (const std::string& node : nodes) curve.add_nodes(node);
  curve.set_task_id(absl::StrCat("fuzz-", n_nodes));
  curve.mutable_measured_at()->set_seconds(absl::ToUnixSeconds(absl::Now()));
  curve.mutable_received_at()->set_seconds(absl::ToUnixSeconds(absl::Now()));
  const double share = schedule::LinkShare(nranks, nranks / n_nodes);
  for (double x = 1024; x <= (1ull << 30); x *= 4) {
    monta::v1::CurvePoint* point = curve.add_points();
    point->set_message_bytes(static_cast<uint64_t>(x));
    point->set_time_seconds(20e-6 + share * x / link_bytes_per_second);
  }
  return curve;
}

void MustSucceed(const absl::Status& status) {
  if (!status.ok()) std::abort();  // the fixture itself is wrong
}

registry::Registry* Build() {
  registry::RegistryOptions options;
  options.lease = absl::Hours(24 * 365);
  auto* cluster = new registry::Registry(options);
  const Instant now = Instant::Now();
  MustSucceed(cluster->Register(Node("node-a"), now));
  MustSucceed(cluster->Register(Node("node-b"), now));
  MustSucceed(cluster->AddCurve(Curve({"node-a"}, 8, 150e9)));
  MustSucceed(cluster->AddCurve(Curve({"node-b"}, 8, 140e9)));
  MustSucceed(cluster->AddCurve(Curve({"node-a", "node-b"}, 16, 20e9)));
  return cluster;
}

}  // namespace

const registry::Registry& FixedCluster() {
  static const registry::Registry* const cluster = Build();
  return *cluster;
}

}  // namespace monta::fuzz
