#include "common/nic_state.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::nic_state {
namespace {

using ::testing::HasSubstr;
namespace v1 = monta::v1;

// What drivers/infiniband/core/sysfs.c prints: "%d: %s" with these names.
TEST(NicStateTest, KernelTextAndNumbersMeanTheSame) {
  const std::vector<std::pair<int, std::string>> states = {{1, "DOWN"},
                                                           {2, "INIT"},
                                                           {3, "ARMED"},
                                                           {4, "ACTIVE"},
                                                           {5, "ACTIVE_DEFER"}};
  for (const auto& [code, name] : states) {
    EXPECT_EQ(PortStateFromCode(code), PortStateFromText(name)) << name;
    EXPECT_EQ(static_cast<int>(PortStateFromText(name)), code) << name;
  }
  const std::vector<std::pair<int, std::string>> phys = {
      {1, "Sleep"},    {2, "Polling"},
      {3, "Disabled"}, {4, "PortConfigurationTraining"},
      {5, "LinkUp"},   {6, "LinkErrorRecovery"},
      {7, "Phy Test"}};
  for (const auto& [code, name] : phys) {
    EXPECT_EQ(PhysStateFromCode(code), PhysStateFromText(name)) << name;
    EXPECT_EQ(static_cast<int>(PhysStateFromText(name)), code) << name;
  }
  // The kernel's names for numbers outside its tables.
  EXPECT_EQ(PortStateFromCode(0), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromText("NOP"), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromCode(6), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromText("UNKNOWN"), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromCode(16), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromCode(-1), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PhysStateFromCode(0), v1::NIC_PHYS_STATE_UNKNOWN);
  EXPECT_EQ(PhysStateFromText("<unknown>"), v1::NIC_PHYS_STATE_UNKNOWN);
  EXPECT_EQ(PhysStateFromCode(8), v1::NIC_PHYS_STATE_UNKNOWN);
  EXPECT_EQ(LinkLayerFromText("InfiniBand"), v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(LinkLayerFromText("Ethernet"), v1::NIC_LINK_LAYER_ETHERNET);
  EXPECT_EQ(LinkLayerFromText("Unknown"), v1::NIC_LINK_LAYER_UNKNOWN);
}

TEST(NicStateTest, OperatorSpellingsAndEthernetOperstate) {
  EXPECT_EQ(PortStateFromText(" Active\n"), v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(PortStateFromText("active_defer"), v1::NIC_PORT_STATE_ACTIVE_DEFER);
  EXPECT_EQ(PhysStateFromText("link_up"), v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(PhysStateFromText("PhyTest"), v1::NIC_PHYS_STATE_PHY_TEST);
  EXPECT_EQ(LinkLayerFromText("infiniband"), v1::NIC_LINK_LAYER_INFINIBAND);
  // /sys/class/net/*/operstate of an Ethernet NIC, read as RoCE reports it.
  EXPECT_EQ(PortStateFromText("up"), v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(PortStateFromText("down"), v1::NIC_PORT_STATE_DOWN);
  EXPECT_EQ(PhysStateFromText("up"), v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(PhysStateFromText("down"), v1::NIC_PHYS_STATE_DISABLED);
  EXPECT_EQ(PortStateFromText("dormant"), v1::NIC_PORT_STATE_UNKNOWN);
  // Not known at all, and text that names no value (a typo stays visible).
  EXPECT_EQ(PortStateFromText(""), v1::NIC_PORT_STATE_UNSPECIFIED);
  EXPECT_EQ(PortStateFromText("  "), v1::NIC_PORT_STATE_UNSPECIFIED);
  EXPECT_EQ(PortStateFromText("ACTVE"), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateFromText("unspecified"), v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(LinkLayerFromText("OmniPath"), v1::NIC_LINK_LAYER_UNKNOWN);
}

TEST(NicStateTest, KindsWinOverTextUnlessUnsetOrFromANewerBuild) {
  v1::Nic nic;
  nic.set_state("ACTIVE");  // an agent older than the enums
  EXPECT_EQ(PortStateOf(nic), v1::NIC_PORT_STATE_ACTIVE);
  nic.set_state("weird");
  nic.set_state_kind(v1::NIC_PORT_STATE_ARMED);  // a newer spelling
  EXPECT_EQ(PortStateOf(nic), v1::NIC_PORT_STATE_ARMED);
  // A value this build does not know is read as unspecified: from the text.
  nic.set_state("DOWN");
  nic.set_state_kind(static_cast<v1::NicPortState>(9));
  EXPECT_EQ(PortStateOf(nic), v1::NIC_PORT_STATE_DOWN);
  nic.set_phys_state("LinkUp");
  nic.set_link_layer("Ethernet");
  FillKinds(nic);
  // Kept for a newer reader; this build reads it as the text says.
  EXPECT_EQ(static_cast<int>(nic.state_kind()), 9);
  nic.clear_state_kind();
  FillKinds(nic);
  EXPECT_EQ(nic.state_kind(), v1::NIC_PORT_STATE_DOWN);
  EXPECT_EQ(nic.phys_state_kind(), v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(nic.link_layer_kind(), v1::NIC_LINK_LAYER_ETHERNET);
  EXPECT_EQ(nic.state(), "DOWN");  // the raw text stays
}

TEST(NicStateTest, DisagreementNamesTheField) {
  v1::Nic nic;
  nic.set_state("ACTIVE");
  nic.set_state_kind(v1::NIC_PORT_STATE_ACTIVE);
  nic.set_phys_state("LinkUp");
  nic.set_phys_state_kind(v1::NIC_PHYS_STATE_LINK_UP);
  nic.set_link_layer("InfiniBand");
  nic.set_link_layer_kind(v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_TRUE(CheckKindsAgree(nic, "topology.nics[0]").ok());

  v1::Nic bad = nic;
  bad.set_state_kind(v1::NIC_PORT_STATE_DOWN);
  absl::Status s = CheckKindsAgree(bad, "topology.nics[2]");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("topology.nics[2].state_kind: "
                                     "NIC_PORT_STATE_DOWN disagrees with "
                                     "state, which reads as "
                                     "NIC_PORT_STATE_ACTIVE"));
  bad = nic;
  bad.set_link_layer_kind(v1::NIC_LINK_LAYER_UNKNOWN);
  EXPECT_THAT(CheckKindsAgree(bad, "n").message(),
              HasSubstr("n.link_layer_kind: NIC_LINK_LAYER_UNKNOWN"));
  bad = nic;
  bad.set_phys_state_kind(v1::NIC_PHYS_STATE_POLLING);
  EXPECT_THAT(CheckKindsAgree(bad, "n").message(),
              HasSubstr("n.phys_state_kind"));

  // Not checked: text this build cannot read, a kind it does not know, and
  // no kind at all.
  v1::Nic open = nic;
  open.set_state("FUTURE_STATE");
  EXPECT_TRUE(CheckKindsAgree(open, "n").ok());
  open = nic;
  open.set_state_kind(static_cast<v1::NicPortState>(9));
  EXPECT_TRUE(CheckKindsAgree(open, "n").ok());
  open.clear_state_kind();
  open.set_state("");
  EXPECT_TRUE(CheckKindsAgree(open, "n").ok());
}

TEST(NicStateTest, TextForPeopleAndTheUpRule) {
  v1::Nic nic;
  EXPECT_EQ(PortStateText(nic), "");
  EXPECT_TRUE(CountsAsUp(nic));  // nothing known: counted, as always
  nic.set_state("ACTIVE");
  nic.set_state_kind(v1::NIC_PORT_STATE_ACTIVE);
  nic.set_phys_state_kind(v1::NIC_PHYS_STATE_LINK_UP);
  nic.set_link_layer_kind(v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(PortStateText(nic), "active");
  EXPECT_EQ(PhysStateText(nic), "link_up");
  EXPECT_EQ(LinkLayerText(nic), "infiniband");
  EXPECT_TRUE(CountsAsUp(nic));
  nic.set_state("NOP");
  nic.set_state_kind(v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(PortStateText(nic), "unknown (NOP)");
  EXPECT_FALSE(CountsAsUp(nic));
  nic.set_state("");
  EXPECT_EQ(PortStateText(nic), "unknown");
  EXPECT_FALSE(CountsAsUp(nic));
  nic.set_state("DOWN");
  nic.set_state_kind(v1::NIC_PORT_STATE_DOWN);
  EXPECT_FALSE(CountsAsUp(nic));
  nic.clear_state_kind();  // an older agent's "DOWN" is down too
  EXPECT_FALSE(CountsAsUp(nic));
  nic.set_state("up");  // a declared Ethernet NIC
  EXPECT_TRUE(CountsAsUp(nic));
}

}  // namespace
}  // namespace monta::nic_state
