// monta-planner --migrate_from_sqlite=FILE --store=etcd: copies a SQLite store
// file into the etcd store (server/etcd_store/migrate.h), prints the counts
// per kind and exits; no server is started.
#ifndef MONTA_SERVER_MIGRATE_FROM_SQLITE_H_
#define MONTA_SERVER_MIGRATE_FROM_SQLITE_H_

#include <string>

#include "server/etcd/client.h"

namespace monta {

// The process's exit status: 0 when everything was copied, 1 otherwise
// (the error on stderr, in one line naming the flag or the record).
int MigrateFromSqlite(const std::string& path, etcd::ClientOptions etcd,
                      const std::string& prefix, bool into_nonempty);

}  // namespace monta

#endif  // MONTA_SERVER_MIGRATE_FROM_SQLITE_H_
