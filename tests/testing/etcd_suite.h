// A GoogleTest suite on one real etcd cluster (tests/testing/etcd_cluster):
// started before the suite's first test, killed and its data removed after the
// last; each test gets a client of every member (`client_`) and a key prefix
// of its own, "/<test name>" (`prefix_`).
//
//   class MyTest : public monta::testing::EtcdSuite<3> {};
//   TEST_F(MyTest, Something) { client_->Put(prefix_ + "/k", "v"); }
#ifndef MONTA_TESTS_TESTING_ETCD_SUITE_H_
#define MONTA_TESTS_TESTING_ETCD_SUITE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "tests/testing/etcd_cluster.h"

namespace monta::testing {

template <int kMembers>
class EtcdSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EtcdCluster::Options options;
    options.members = kMembers;
    auto cluster = EtcdCluster::Start(std::move(options));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
    prefix_ = absl::StrCat(
        "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // A plaintext client of every member, with `options`' other settings.
  static std::unique_ptr<etcd::Client> NewClient(
      etcd::ClientOptions options = {}) {
    options.endpoints = cluster_->endpoints();
    options.security.insecure = true;
    auto client = etcd::Client::Create(std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  static inline EtcdCluster* cluster_ = nullptr;
  std::unique_ptr<etcd::Client> client_;
  std::string prefix_;
};

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_ETCD_SUITE_H_
