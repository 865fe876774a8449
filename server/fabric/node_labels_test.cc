#include "server/fabric/node_labels.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace monta::fabric {
namespace {

// As `kubectl get nodes -o json` prints it, trimmed: status and spec carry
// what ParseNodeList skips.
constexpr char kNodeList[] = R"({
  "apiVersion": "v1",
  "kind": "List",
  "items": [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "gpu-001", "uid": "1",
                  "labels": {"kubernetes.io/hostname": "gpu-001",
                             "network.topology.nvidia.com/leaf": "leaf-07",
                             "network.topology.nvidia.com/spine": "spine-1",
                             "topology.kubernetes.io/zone": "zone-a"}},
     "spec": {"podCIDR": "10.0.0.0/24"},
     "status": {"images": [{"names": ["x"], "sizeBytes": 1}],
                "nodeInfo": {"kubeletVersion": "v1.30.0"}}},
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "gpu-002",
                  "labels": {"cloud.provider.com/topology-rack": "rack-2",
                             "cloud.provider.com/topology-block": "block-1"}}},
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "control-plane",
                  "labels": {"topology.kubernetes.io/zone": "zone-a"}}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}}
  ],
  "metadata": {"resourceVersion": ""}
})";

TEST(NodeLabelsTest, ReadsRackAndBlockFromTopographAndKueueKeys) {
  absl::StatusOr<NodeLabels> labels =
      ParseNodeList(kNodeList, DefaultLabelKeys());
  ASSERT_TRUE(labels.ok()) << labels.status();
  // A zone alone names no rack: control-plane and bare are not placed.
  ASSERT_EQ(labels->nodes.size(), 2u);
  EXPECT_EQ(labels->racks, 2);
  const LabelPlace& gpu1 = labels->nodes.at("gpu-001");
  EXPECT_EQ(gpu1.rack, "leaf-07");
  EXPECT_EQ(gpu1.rack_key, "network.topology.nvidia.com/leaf");
  EXPECT_EQ(gpu1.block, "spine-1");  // spine before zone
  EXPECT_EQ(gpu1.block_key, "network.topology.nvidia.com/spine");
  const LabelPlace& gpu2 = labels->nodes.at("gpu-002");
  EXPECT_EQ(gpu2.rack, "rack-2");
  EXPECT_EQ(gpu2.block, "block-1");
  EXPECT_EQ(gpu2.block_key, "cloud.provider.com/topology-block");
}

TEST(NodeLabelsTest, KeysAreConfigurable) {
  LabelKeys keys;
  keys.rack = {"topology.kubernetes.io/zone"};
  absl::StatusOr<NodeLabels> labels = ParseNodeList(kNodeList, keys);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->nodes.size(), 2u);  // gpu-001 and control-plane
  EXPECT_EQ(labels->nodes.at("control-plane").rack, "zone-a");
  EXPECT_EQ(labels->racks, 1);
}

TEST(NodeLabelsTest, PlaceFromLabelsSkipsValuesThatAreNoNames) {
  const LabelKeys keys = DefaultLabelKeys();
  LabelPlace place =
      PlaceFromLabels({{"network.topology.nvidia.com/leaf", "not a rack!"},
                       {"cloud.provider.com/topology-rack", "r9"}},
                      keys);
  EXPECT_EQ(place.rack, "r9");
  EXPECT_EQ(place.rack_key, "cloud.provider.com/topology-rack");
  EXPECT_EQ(place.block, "");
  EXPECT_EQ(PlaceFromLabels({}, keys).rack, "");
}

TEST(NodeLabelsTest, BadDocumentsNameWhatIsWrong) {
  const LabelKeys keys = DefaultLabelKeys();
  struct Case {
    std::string text;
    std::string want;
  };
  const Case cases[] = {
      {"not json", "not JSON"},
      {"[]", "kind: expected \"List\" or \"NodeList\""},
      {R"({"kind": "Pod", "items": []})", "kind: expected"},
      {R"({"kind": "List"})", "items: expected a list"},
      {R"({"kind": "List", "items": [{"spec": {}}]})",
       "items[0].metadata: expected an object"},
      {R"({"kind": "List", "items": [{"metadata": {"name": "Bad_Name"}}]})",
       "items[0].metadata.name: expected a node name"},
      {R"({"kind": "NodeList", "items": [{"metadata": {"name": "a"}},
          {"metadata": {"name": "b", "labels": ["x"]}}]})",
       "items[1].metadata.labels: expected an object"},
      {R"({"kind": "List", "items": [{"metadata": {"name": "a",
          "labels": {"network.topology.nvidia.com/leaf": 7}}}]})",
       "items[0].metadata.labels: expected string values"},
      {R"({"kind": "List", "items": [
          {"metadata": {"name": "a", "labels": {"network.topology.nvidia.com/leaf": "r"}}},
          {"metadata": {"name": "a", "labels": {"network.topology.nvidia.com/leaf": "r"}}}]})",
       "items[1].metadata.name: node a is listed twice"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<NodeLabels> labels = ParseNodeList(c.text, keys);
    ASSERT_FALSE(labels.ok()) << c.text;
    EXPECT_TRUE(absl::StrContains(labels.status().message(), c.want))
        << c.text << "\ngot: " << labels.status().message();
  }
}

TEST(NodeLabelsTest, SizesAreBounded) {
  FabricLimits limits;
  limits.max_nodes = 2;
  absl::StatusOr<NodeLabels> many = ParseNodeList(kNodeList, {}, limits);
  EXPECT_EQ(many.status().code(), absl::StatusCode::kResourceExhausted);
  limits.max_nodes = 100;
  limits.max_node_labels_bytes = 100;
  absl::StatusOr<NodeLabels> big = ParseNodeList(kNodeList, {}, limits);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(big.status().message(),
                                "--fabric_node_labels_max_bytes"));
}

TEST(NodeLabelsTest, LabelKeyLists) {
  absl::StatusOr<std::vector<std::string>> keys = ParseLabelKeys(
      "--fabric_rack_label_keys",
      "network.topology.nvidia.com/leaf, rack ,example.com/a.b-c");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{"network.topology.nvidia.com/leaf",
                                             "rack", "example.com/a.b-c"}));
  EXPECT_TRUE(ParseLabelKeys("--x", "")->empty());
  for (const std::string& bad :
       {std::string("Example.com/x"), std::string("a/"), std::string("/a"),
        std::string("a b"), absl::StrCat("x/", std::string(64, 'a'))}) {
    absl::StatusOr<std::vector<std::string>> parsed =
        ParseLabelKeys("--fabric_rack_label_keys", bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(),
                                 "--fabric_rack_label_keys: expected label "
                                 "keys"))
        << parsed.status();
  }
}

}  // namespace
}  // namespace monta::fabric
