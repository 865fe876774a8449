// Register (and the topology validation in front of it): any bytes that parse
// as a monta.v1.RegisterRequest go through ValidateTopology and a fresh
// in-memory registry with the planner's topology differ, as an agent (or
// anyone reaching the gRPC port) would send them. The fuzzed topology is
// diffed against a well-formed one in both directions (re-registration and
// heartbeat), and the registry must stay consistent: what validation refuses
// Register refuses, a registered node can be read back, another instance is
// refused while the lease is alive, and a deregistered node is gone.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/nic_state.h"
#include "common/topology_diff.h"
#include "proto/monta/v1/agent.pb.h"
#include "server/registry/registry.h"
#include "server/registry/topology_validation.h"

namespace {

using monta::registry::Registry;

// A valid 2-GPU, 1-NIC topology to diff the fuzzed one against.
monta::v1::NodeTopology Baseline() {
  monta::v1::NodeTopology topology;
  topology.set_hostname("baseline");
  for (int i = 0; i < 2; ++i) {
    monta::v1::Gpu* gpu = topology.add_gpus();
    gpu->set_index(i);
    gpu->set_name("NVIDIA A800-SXM4-80GB");
    gpu->set_uuid(i == 0 ? "GPU-0" : "GPU-1");
  }
  monta::v1::GpuLink* link = topology.add_gpu_links();
  link->set_gpu_a(0);
  link->set_gpu_b(1);
  link->set_path(monta::v1::PATH_TYPE_NVLINK);
  link->set_nvlink_count(8);
  monta::v1::Nic* nic = topology.add_nics();
  nic->set_name("mlx5_0");
  nic->set_port(1);
  nic->set_state("ACTIVE");
  nic->set_state_kind(monta::v1::NIC_PORT_STATE_ACTIVE);
  nic->set_rate_bytes_per_second(5e10);
  return topology;
}

void Check(bool condition) {
  if (!condition) std::abort();
}

bool IsRefusal(const absl::Status& status) {
  return (status.code() == absl::StatusCode::kInvalidArgument ||
          status.code() == absl::StatusCode::kResourceExhausted) &&
         !status.message().empty();
}

// Re-registration and heartbeats that diff `request`'s topology against the
// baseline, then the lease rules and Deregister.
// Both clocks `seconds` after a fixed start (the registry decides on the
// monotonic one).
monta::Instant At(int seconds) {
  static const monta::MonoTime start =
      monta::MonoTime() + std::chrono::hours(1000);
  return monta::Instant{absl::FromUnixSeconds(1'700'000'000 + seconds),
                        monta::MonoAfter(start, absl::Seconds(seconds))};
}

void Exercise(Registry& registry, const monta::v1::RegisterRequest& request) {
  monta::v1::RegisterRequest baseline = request;
  *baseline.mutable_topology() = Baseline();
  Check(registry.Register(baseline, At(0)).ok());
  Check(registry.Register(request, At(1)).ok());
  monta::v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_name(request.node_name());
  heartbeat.set_instance_id(request.instance_id());
  *heartbeat.mutable_topology() = Baseline();
  Check(registry.Heartbeat(heartbeat, At(2)).ok());
  *heartbeat.mutable_topology() = request.topology();
  Check(registry.Heartbeat(heartbeat, At(3)).ok());

  absl::StatusOr<monta::v1::NodeInfo> node =
      registry.Get(request.node_name(), At(3));
  Check(node.ok() && node->state() == monta::v1::NODE_STATE_ALIVE);
  // Every change the differ reports has a kind: none is lost as UNSPECIFIED.
  for (const monta::v1::TopologyEvent& event : node->events()) {
    Check(event.change() != monta::v1::TOPOLOGY_CHANGE_UNSPECIFIED &&
          !event.message().empty());
  }
  // The stored NICs say what their texts mean, and agree with them.
  for (const monta::v1::Nic& nic : node->topology().nics()) {
    Check(monta::nic_state::CheckKindsAgree(nic, "nic").ok());
    Check(nic.state_kind() != monta::v1::NIC_PORT_STATE_UNSPECIFIED ||
          monta::nic_state::PortStateFromText(nic.state()) ==
              monta::v1::NIC_PORT_STATE_UNSPECIFIED);
  }
  Check(registry.List(At(3), false).size() == 1);

  monta::v1::RegisterRequest other = request;
  other.set_instance_id(request.instance_id() == "other" ? "another" : "other");
  Check(registry.Register(other, At(4)).code() ==
        absl::StatusCode::kAlreadyExists);
  Check(registry.Deregister(request.node_name(), request.instance_id(), At(5))
            .ok());
  Check(registry.List(At(5), false).empty());
  Check(registry.Register(other, At(6)).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  monta::v1::RegisterRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  monta::registry::RegistryOptions options;
  options.lease = absl::Seconds(15);
  Registry registry(options, monta::topology_diff::DiffTopologyEvents);

  const absl::Status valid = monta::registry::ValidateTopology(
      request.topology(), options.topology_limits);
  Check(valid.ok() || IsRefusal(valid));
  const absl::Status registered = registry.Register(request, At(0));
  if (!registered.ok()) {
    Check(IsRefusal(registered));
    Check(registry.List(At(0), true).empty());
    return 0;
  }
  Check(valid.ok());
  Registry fresh(options, monta::topology_diff::DiffTopologyEvents);
  Exercise(fresh, request);
  return 0;
}
