// The store seam's contract (store_contract.h) run against SqliteStore: a
// fresh database file per case; dropping the history is closing and reopening
// the file (a watch holds the commits of the process that made them).
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/store/sqlite_store.h"
#include "server/store/store_contract.h"

namespace monta::store {
namespace {

std::string FreshPath() {
  static std::atomic<int> next{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/contract-", getpid(),
                      "-", next++, ".db");
}

StoreFactory SqliteFactory() {
  StoreFactory f;
  f.name = "sqlite";
  f.make = []() -> absl::StatusOr<std::unique_ptr<Store>> {
    auto store = SqliteStore::Open(FreshPath());
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(*store));
  };
  f.drop_history = [](std::unique_ptr<Store>& store) -> absl::Status {
    const std::string path = static_cast<SqliteStore&>(*store).path();
    store.reset();
    auto reopened = SqliteStore::Open(path);
    if (!reopened.ok()) return reopened.status();
    store = std::move(*reopened);
    return absl::OkStatus();
  };
  return f;
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
                         ::testing::Values(SqliteFactory()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace monta::store
