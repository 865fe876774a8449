#include "server/migrate_from_sqlite.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/str_join.h"
#include "server/etcd_store/migrate.h"
#include "server/store/sqlite_store.h"

namespace monta {

int MigrateFromSqlite(const std::string& path, etcd::ClientOptions etcd,
                      const std::string& prefix, bool into_nonempty) {
  // SqliteStore::Open creates a missing file: a typo must not migrate an
  // empty store.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    std::cerr << "monta-planner: --migrate_from_sqlite " << path << ": "
              << std::strerror(errno) << std::endl;
    return 1;
  }
  // Opened as the planner opens it: checked, and an older schema migrated
  // in place. Stop the SQLite planner first.
  absl::StatusOr<std::unique_ptr<store::SqliteStore>> from =
      store::SqliteStore::Open(path);
  if (!from.ok()) {
    std::cerr << "monta-planner: --migrate_from_sqlite: "
              << from.status().message() << std::endl;
    return 1;
  }
  const std::string endpoints = absl::StrJoin(etcd.endpoints, ",");
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Create(std::move(etcd));
  if (!client.ok()) {
    std::cerr << "monta-planner: --migrate_from_sqlite: etcd: "
              << client.status().message() << std::endl;
    return 1;
  }
  etcd_store::MigrationOptions options;
  options.store.prefix = prefix;
  options.into_nonempty = into_nonempty;
  absl::StatusOr<etcd_store::MigrationReport> report =
      etcd_store::MigrateFromSqlite(**from, **client, options);
  if (!report.ok()) {
    std::cerr << "monta-planner: --migrate_from_sqlite " << path << " into "
              << prefix << " on " << endpoints << ": "
              << report.status().message() << std::endl;
    return 1;
  }
  std::cout << "migrated " << path << " into etcd " << prefix << " on "
            << endpoints << "\n"
            << report->Summary() << std::flush;
  return 0;
}

}  // namespace monta
