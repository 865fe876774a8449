#include "server/registry/topology_validation.h"

#include <limits>

#include "gtest/gtest.h"

namespace monta::registry {
namespace {

monta::v1::NodeTopology Good() {
  monta::v1::NodeTopology t;
  t.set_hostname("dgx-01");
  for (int i = 0; i < 2; ++i) t.add_gpus()->set_index(i);
  auto* link = t.add_gpu_links();
  link->set_gpu_a(0);
  link->set_gpu_b(1);
  link->set_nvlink_count(18);
  auto* nic = t.add_nics();
  nic->set_name("mlx5_0");
  nic->set_port(1);
  nic->set_rate_bytes_per_second(400e9 / 8);
  nic->set_state("ACTIVE");
  nic->set_state_kind(monta::v1::NIC_PORT_STATE_ACTIVE);
  nic->set_phys_state("LinkUp");
  nic->set_phys_state_kind(monta::v1::NIC_PHYS_STATE_LINK_UP);
  nic->set_link_layer("InfiniBand");
  nic->set_link_layer_kind(monta::v1::NIC_LINK_LAYER_INFINIBAND);
  (*t.mutable_labels())["network.topology.nvidia.com/leaf"] = "leaf-07";
  return t;
}

void ExpectBad(const monta::v1::NodeTopology& t, const std::string& field) {
  absl::Status s = ValidateTopology(t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), std::string::npos) << s;
}

TEST(TopologyValidationTest, ARealisticTopologyPasses) {
  EXPECT_TRUE(ValidateTopology(Good()).ok());
  EXPECT_TRUE(ValidateTopology(monta::v1::NodeTopology()).ok());  // a CPU node
}

// The NIC enums are open: agents older or newer than this planner pass.
TEST(TopologyValidationTest, NicKindsFromOtherVersionsPass) {
  auto t = Good();
  t.mutable_nics(0)->clear_state_kind();  // older: text only
  t.mutable_nics(0)->clear_phys_state_kind();
  t.mutable_nics(0)->clear_link_layer_kind();
  EXPECT_TRUE(ValidateTopology(t).ok());
  t = Good();  // newer: a value this planner does not know
  t.mutable_nics(0)->set_state_kind(static_cast<monta::v1::NicPortState>(9));
  EXPECT_TRUE(ValidateTopology(t).ok());
  t = Good();  // newer: a spelling this planner cannot read
  t.mutable_nics(0)->set_state("ACTIVE (fast)");
  EXPECT_TRUE(ValidateTopology(t).ok());
  t = Good();  // the enum only
  t.mutable_nics(0)->clear_state();
  EXPECT_TRUE(ValidateTopology(t).ok());
}

TEST(TopologyValidationTest, BrokenFactsNameTheirField) {
  auto t = Good();
  t.mutable_gpus(1)->set_index(0);
  ExpectBad(t, "topology.gpus[1].index");

  t = Good();
  t.mutable_gpu_links(0)->set_gpu_b(7);
  ExpectBad(t, "topology.gpu_links[0]");

  t = Good();
  t.mutable_gpu_links(0)->set_gpu_a(1);
  t.mutable_gpu_links(0)->set_gpu_b(0);
  ExpectBad(t, "topology.gpu_links[0]");

  t = Good();
  t.mutable_nics(0)->set_rate_bytes_per_second(-400);
  ExpectBad(t, "topology.nics[0].rate_bytes_per_second");

  t = Good();
  t.mutable_nics(0)->set_rate_bytes_per_second(
      std::numeric_limits<double>::quiet_NaN());
  ExpectBad(t, "topology.nics[0].rate_bytes_per_second");

  // An enum that contradicts the text it stands for.
  t = Good();
  t.mutable_nics(0)->set_state_kind(monta::v1::NIC_PORT_STATE_DOWN);
  ExpectBad(t, "topology.nics[0].state_kind: NIC_PORT_STATE_DOWN disagrees");
  t = Good();
  t.mutable_nics(0)->set_phys_state_kind(monta::v1::NIC_PHYS_STATE_UNKNOWN);
  ExpectBad(t, "topology.nics[0].phys_state_kind");
  t = Good();
  t.mutable_nics(0)->set_link_layer_kind(monta::v1::NIC_LINK_LAYER_ETHERNET);
  ExpectBad(t, "topology.nics[0].link_layer_kind");

  t = Good();
  t.mutable_nics(0)->clear_name();
  ExpectBad(t, "topology.nics[0].name");

  t = Good();
  (*t.mutable_labels())["zone"] = std::string(100, 'z');
  ExpectBad(t, "topology.labels");
}

void ExpectTooBig(const monta::v1::NodeTopology& t, const std::string& field,
                  const std::string& flag,
                  const TopologyLimits& limits = TopologyLimits()) {
  absl::Status s = ValidateTopology(t, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << field << s;
  EXPECT_NE(s.message().find(field + ":"), std::string::npos) << s;
  EXPECT_NE(s.message().find(flag), std::string::npos) << s;
}

TEST(TopologyValidationTest, EveryStringIsBounded) {
  const std::string big(257, 'x');
  const std::string flag = "--max_topology_string_bytes";
  auto t = Good();
  t.mutable_nics(0)->set_state(std::string(1 << 20, 'A'));  // a 1 MiB state
  ExpectTooBig(t, "topology.nics[0].state", flag);
  t = Good();
  t.mutable_nics(0)->set_link_layer(big);
  ExpectTooBig(t, "topology.nics[0].link_layer", flag);
  t = Good();
  t.mutable_nics(0)->set_phys_state(big);
  ExpectTooBig(t, "topology.nics[0].phys_state", flag);
  t = Good();
  t.mutable_nics(0)->set_pci_address(big);
  ExpectTooBig(t, "topology.nics[0].pci_address", flag);
  t = Good();
  t.mutable_gpus(1)->set_uuid(big);
  ExpectTooBig(t, "topology.gpus[1].uuid", flag);
  t = Good();
  t.mutable_gpus(0)->set_pci_bus_id(big);
  ExpectTooBig(t, "topology.gpus[0].pci_bus_id", flag);
  t = Good();
  t.set_hostname(big);
  ExpectTooBig(t, "topology.hostname", flag);
  t = Good();
  t.add_numa_nodes()->set_cpu_list(std::string(4097, '0'));
  ExpectTooBig(t, "topology.numa_nodes[0].cpu_list",
               "--max_topology_text_bytes");
  t = Good();
  t.set_nvml_status(std::string(4097, 's'));
  ExpectTooBig(t, "topology.nvml_status", "--max_topology_text_bytes");

  // Exactly at the limit passes; the limit is the caller's.
  t = Good();
  t.mutable_nics(0)->set_state(std::string(256, 'A'));
  EXPECT_TRUE(ValidateTopology(t).ok());
  TopologyLimits small;
  small.max_string_bytes = 10;  // "dgx-01" fits, a 256-byte state not
  ExpectTooBig(t, "topology.nics[0].state", flag, small);
}

TEST(TopologyValidationTest, EveryRepeatedFieldIsBounded) {
  const std::string flag = "--max_topology_entries";
  auto t = Good();
  for (int i = 2; i < 70; ++i) t.add_gpus()->set_index(i);
  ExpectTooBig(t, "topology.gpus", flag);
  t = Good();
  for (int i = 0; i < 65; ++i) t.add_numa_nodes()->set_id(i);
  ExpectTooBig(t, "topology.numa_nodes", flag);
  t = Good();
  for (int i = 0; i < 65; ++i) t.add_nics()->set_name("mlx5_0");
  ExpectTooBig(t, "topology.nics", flag);
  t = Good();
  for (int i = 0; i < 65; ++i) (*t.mutable_labels())[std::to_string(i)] = "v";
  ExpectTooBig(t, "topology.labels", flag);
  t = Good();
  *t.add_gpu_links() = t.gpu_links(0);  // 2 links between 2 GPUs
  ExpectTooBig(t, "topology.gpu_links", "one per pair");

  TopologyLimits small;
  small.max_entries = 1;
  ExpectTooBig(Good(), "topology.gpus", flag, small);
}

}  // namespace
}  // namespace monta::registry
