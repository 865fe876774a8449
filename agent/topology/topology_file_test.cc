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
                "nics[0].link_layer: expected InfiniBand or Ethernet"},
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
