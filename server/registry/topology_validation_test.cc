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

  t = Good();
  t.mutable_nics(0)->clear_name();
  ExpectBad(t, "topology.nics[0].name");

  t = Good();
  for (int i = 2; i < 70; ++i) t.add_gpus()->set_index(i);
  ExpectBad(t, "topology.gpus");

  t = Good();
  (*t.mutable_labels())["zone"] = std::string(100, 'z');
  ExpectBad(t, "topology.labels");
}

}  // namespace
}  // namespace monta::registry
