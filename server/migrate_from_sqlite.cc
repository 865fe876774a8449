#include "server/migrate_from_sqlite.h"

#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/str_join.h"
#include "server/etcd_store/migrate.h"
#include "server/store/sqlite_store.h"

namespace monta {

int MigrateFromSqlite(const std::string& path, etcd::ClientOptions etcd,
                      const std::string& prefix, bool into_nonempty) {
  // Read-only: the source file's bytes stay as they are (no schema, no
  // write probe, no upgrade), and a missing file is not created. Stop the
  // SQLite planner first.
  absl::StatusOr<std::unique_ptr<store::SqliteStore>> from =
      store::SqliteStore::OpenReadOnly(path);
  if (!from.ok()) {
    std::cerr << "monta-planner: --migrate_from_sqlite "
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
