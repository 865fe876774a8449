// The contract of the store seam (store.h) as a gtest suite that every
// implementation instantiates with its factory, e.g.
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
//                            ::testing::Values(SqliteFactory()));
//
// (sqlite_store_contract_test.cc; server/etcd_store/etcd_store_test.cc runs
// the same suite against tests/testing/etcd_cluster). Each case starts from a
// fresh, empty store.
#ifndef MONTA_SERVER_STORE_STORE_CONTRACT_H_
#define MONTA_SERVER_STORE_STORE_CONTRACT_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/store/store.h"

namespace monta::store {

struct StoreFactory {
  std::string name;
  // A fresh, empty store of its own.
  std::function<absl::StatusOr<std::unique_ptr<Store>>()> make;
  // Makes `store` drop the history a watch could start from, through its
  // newest revision, keeping its state (SQLite: close and reopen the file;
  // etcd: compact). May replace `store`.
  std::function<absl::Status(std::unique_ptr<Store>& store)> drop_history;
};

inline std::ostream& operator<<(std::ostream& out, const StoreFactory& f) {
  return out << f.name;
}

class StoreContractTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  std::unique_ptr<Store> store_;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_STORE_CONTRACT_H_
