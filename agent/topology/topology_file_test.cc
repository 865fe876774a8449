#include "agent/topology/topology_file.h"

#include <string>

#include "agent/topology/sysfs_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

using ::testing::HasSubstr;

TEST(LoadTopologyFile, ReadsTheDeclaredH100) {
  absl::StatusOr<monta::v1::NodeTopology> topo = LoadTopologyFile(
      RunfilePath("agent/topology/testdata/declared_h100.yaml"));
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->profile_name(), "h100-hgx");
  EXPECT_EQ(topo->labels().at("network.topology.nvidia.com/leaf"), "leaf-07");
  ASSERT_EQ(topo->gpus_size(), 8);
  EXPECT_EQ(topo->gpus(3).pci_bus_id(), "0000:5d:00.0");
  EXPECT_EQ(topo->gpus(3).nearest_nic_path(), monta::v1::PATH_TYPE_PXB);
  EXPECT_EQ(topo->gpus(3).provenance(), monta::v1::PROVENANCE_DECLARED);
  ASSERT_EQ(topo->gpu_links_size(), 28);  // all_gpu_pairs fills the other 27
  for (const auto& link : topo->gpu_links()) {
    EXPECT_EQ(link.path(), monta::v1::PATH_TYPE_NVLINK);
    EXPECT_EQ(link.nvlink_count(), 18);
    EXPECT_EQ(link.provenance(), monta::v1::PROVENANCE_DECLARED);
  }
  ASSERT_EQ(topo->nics_size(), 8);
  EXPECT_EQ(topo->nics(1).port(), 1);  // default port
  EXPECT_EQ(topo->nics(0).rate_bytes_per_second(), 400e9 / 8);
  EXPECT_EQ(topo->nics(0).provenance(), monta::v1::PROVENANCE_DECLARED);
  EXPECT_EQ(topo->nics(0).link_layer(), "InfiniBand");
  EXPECT_EQ(topo->nics(0).link_layer_kind(),
            monta::v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(topo->nics(0).state(), "ACTIVE");
  EXPECT_EQ(topo->nics(0).state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(topo->nics(0).phys_state(), "LinkUp");
  EXPECT_EQ(topo->nics(0).phys_state_kind(), monta::v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(topo->nics(1).link_layer_kind(),
            monta::v1::NIC_LINK_LAYER_UNSPECIFIED);  // not declared
}

TEST(ParseTopologyYaml, NicStatesKeepTheTextAndSayWhatItMeans) {
  absl::StatusOr<monta::v1::NodeTopology> topo = ParseTopologyYaml(
      "nics:\n"
      "  - {name: eth0, link_layer: Ethernet, state: up, phys_state: up}\n"
      "  - {name: eth1, link_layer: ethernet, state: down, phys_state: down}\n"
      "  - {name: mlx5_0, state: Active, phys_state: link_up}\n"
      "  - {name: mlx5_1, state: INIT, phys_state: Phy Test}\n",
      "t.yaml");
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_EQ(topo->nics_size(), 4);
  EXPECT_EQ(topo->nics(0).state(), "up");
  EXPECT_EQ(topo->nics(0).state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(topo->nics(0).phys_state_kind(), monta::v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(topo->nics(0).link_layer_kind(),
            monta::v1::NIC_LINK_LAYER_ETHERNET);
  EXPECT_EQ(topo->nics(1).link_layer(), "ethernet");
  EXPECT_EQ(topo->nics(1).state_kind(), monta::v1::NIC_PORT_STATE_DOWN);
  EXPECT_EQ(topo->nics(1).phys_state_kind(),
            monta::v1::NIC_PHYS_STATE_DISABLED);
  EXPECT_EQ(topo->nics(2).state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(topo->nics(2).phys_state_kind(), monta::v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(topo->nics(3).state_kind(), monta::v1::NIC_PORT_STATE_INIT);
  EXPECT_EQ(topo->nics(3).phys_state_kind(),
            monta::v1::NIC_PHYS_STATE_PHY_TEST);
}

TEST(ParseTopologyYaml, EmptyDocumentDeclaresNothing) {
  absl::StatusOr<monta::v1::NodeTopology> topo =
      ParseTopologyYaml("", "t.yaml");
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->gpus_size(), 0);
}

struct BadCase {
  const char* yaml;
  const char* error;
};

class TopologyFileErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(TopologyFileErrors, NameTheFieldAndTheExpectation) {
  absl::StatusOr<monta::v1::NodeTopology> topo =
      ParseTopologyYaml(GetParam().yaml, "node.yaml");
  ASSERT_FALSE(topo.ok()) << GetParam().yaml;
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topo.status().message(), HasSubstr(GetParam().error));
  EXPECT_THAT(topo.status().message(), HasSubstr("node.yaml: "));
}

INSTANTIATE_TEST_SUITE_P(
    All, TopologyFileErrors,
    ::testing::Values(
        BadCase{"gpu: []", "gpu: unknown key; expected one of:"},
        BadCase{"gpus: [{index: 0, memory: 1}]", "gpus[0].memory: unknown key"},
        BadCase{"gpus: [{index: 0}, {index: 0}]",
                "gpus[1].index: duplicate GPU index 0 (also gpus[0])"},
        BadCase{"gpus: [{name: x}]", "gpus[0].index: required"},
        BadCase{"gpus: [{index: -1}]", "gpus[0].index: must be >= 0"},
        BadCase{"gpus: [{index: zero}]", "gpus[0].index: expected an integer"},
        BadCase{"gpus: [{index: 0}]\nlinks: [{gpus: [0, 3], path: NV8}]",
                "links[0].gpus: GPU 3 is not declared under gpus"},
        BadCase{"gpus: [{index: 0}]\nlinks: [{gpus: [0, 0], path: NV8}]",
                "links[0].gpus: a link needs two different GPUs"},
        BadCase{"gpus: [{index: 0}, {index: 1}]\n"
                "links: [{gpus: [0, 1], path: NVL}]",
                "links[0].path: expected NV<n>, PIX"},
        BadCase{"gpus: [{index: 0}, {index: 1}]\n"
                "links: [{gpus: [0, 1], path: NV8, nvlink_count: 4}]",
                "links[0].nvlink_count: 4 disagrees with path NV8"},
        BadCase{"gpus: [{index: 0}, {index: 1}]\n"
                "links: [{gpus: [1, 0], path: NV8}, {gpus: [0, 1], path: NV8}]",
                "links[1].gpus: pair 0-1 listed twice"},
        BadCase{"gpus: [{index: 0}, {index: 1}]\n"
                "links: [{gpus: [0], path: NV8}]",
                "links[0].gpus: expected two GPU indices"},
        BadCase{"all_gpu_pairs: fast", "all_gpu_pairs: expected NV<n>"},
        BadCase{"nics: [{name: mlx5_0, rate_gbps: -400}]",
                "nics[0].rate_gbps: must be >= 0 Gb/s, got -400"},
        BadCase{"nics: [{name: mlx5_0, rate_gbps: fast}]",
                "nics[0].rate_gbps: expected a number"},
        BadCase{"nics: [{port: 1}]", "nics[0].name: required"},
        BadCase{"nics: [{name: mlx5_0}, {name: mlx5_0, port: 1}]",
                "nics[1]: duplicate NIC mlx5_0 port 1 (also nics[0])"},
        BadCase{"nics: [{name: mlx5_0, link_layer: ib}]",
                "nics[0].link_layer: expected InfiniBand or Ethernet, got "
                "\"ib\""},
        BadCase{"nics: [{name: mlx5_0, link_layer: Unknown}]",
                "nics[0].link_layer: expected InfiniBand or Ethernet"},
        BadCase{"nics: [{name: mlx5_0, state: ACTVE}]",
                "nics[0].state: expected an InfiniBand port state (DOWN, INIT, "
                "ARMED, ACTIVE, ACTIVE_DEFER) or an Ethernet operstate (up, "
                "down), got \"ACTVE\""},
        BadCase{"nics: [{name: mlx5_0, state: \"\"}]",
                "nics[0].state: expected an InfiniBand port state"},
        BadCase{"nics: [{name: mlx5_0, phys_state: \"4: LinkUp\"}]",
                "nics[0].phys_state: expected an InfiniBand physical state "
                "(Sleep, Polling"},
        BadCase{"nics: [{name: mlx5_0, state: [ACTIVE]}]",
                "nics[0].state: expected a string"},
        BadCase{"gpus: [{index: 0, nearest_nic: mlx5_9}]",
                "gpus[0].nearest_nic: NIC \"mlx5_9\" is not declared"},
        BadCase{"gpus: [{index: 0, nearest_nic_path: NV18}]",
                "gpus[0].nearest_nic_path: expected PIX, PXB"},
        BadCase{"gpus: [{index: 0, pci_bus_id: \"18:00\"}]",
                "gpus[0].pci_bus_id: expected domain:bus:device.function"},
        BadCase{"nics: [{name: mlx5_0, pci_address: zz}]",
                "nics[0].pci_address: expected domain:bus:device.function"},
        BadCase{"labels: [a, b]", "labels: expected a mapping"},
        BadCase{"gpus: {index: 0}", "gpus: expected a list"},
        BadCase{"gpus: [{index: 0, peer: [}", "not valid YAML"},
        BadCase{"- 1\n- 2", "document: expected a mapping"}));

TEST(ParsePathToken, ReadsTopoMTokens) {
  EXPECT_EQ(ParsePathToken("NV18")->nvlink_count, 18);
  EXPECT_EQ(ParsePathToken("NV18")->path, monta::v1::PATH_TYPE_NVLINK);
  EXPECT_EQ(ParsePathToken("X")->path, monta::v1::PATH_TYPE_SELF);
  EXPECT_EQ(ParsePathToken("SYS")->path, monta::v1::PATH_TYPE_SYS);
  EXPECT_FALSE(ParsePathToken("NV0").ok());
  EXPECT_FALSE(ParsePathToken("pix").ok());
}

TEST(LoadTopologyFile, MissingFileIsNotFound) {
  EXPECT_EQ(LoadTopologyFile("/nonexistent.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace monta::topology
