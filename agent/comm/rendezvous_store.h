// The small key-value store that ranks of one benchmark meet through: Gloo
// publishes its TCP addresses there, NCCL its unique id, Split its colors.
//
// This is the whole interface the agent runtime has to provide (backed by the
// planner's RendezvousSet/RendezvousGet RPCs): Set(key, bytes) and a Get that
// waits for the key until a deadline. Keys are scoped by the caller (one prefix
// per benchmark task), values are opaque bytes of at most a few KiB.
#ifndef MONTA_AGENT_COMM_RENDEZVOUS_STORE_H_
#define MONTA_AGENT_COMM_RENDEZVOUS_STORE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace monta::comm {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Publishes `value` under `key`, replacing an earlier value. Thread-safe.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // Returns the value of `key`, waiting until some rank sets it. Returns
  // kDeadlineExceeded if it is still unset at `deadline` (a deadline in the
  // past still checks once). Thread-safe.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Time deadline) = 0;
};

// Process-local store: ranks that are threads of one process (tests, the
// benchmark's thread mode).
class InMemoryStore : public RendezvousStore {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string, std::less<>> values_ ABSL_GUARDED_BY(mu_);
};

// Store in a shared directory (one file per key, written atomically by
// rename): ranks that are processes on one machine, or on machines sharing a
// file system. Get polls, because files offer no change notification.
class FileStore : public RendezvousStore {
 public:
  // `directory` must exist and be writable.
  explicit FileStore(std::string directory);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) override;

 private:
  std::string PathOf(absl::string_view key) const;
  const std::string directory_;
};

// Prepends "<prefix>/" to every key of `base` (which must outlive this).
class PrefixStore : public RendezvousStore {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<RendezvousStore> base);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) override;

 private:
  const std::string prefix_;
  const std::shared_ptr<RendezvousStore> base_;
};

// Publishes that `rank` of `size` has joined `scope`, then waits until every
// other rank has too. The error names every rank still missing at `deadline`,
// e.g. "rank(s) 3 of 4 never joined rendezvous 'task7/world' by ...".
absl::Status JoinAll(RendezvousStore& store, absl::string_view scope, int rank,
                     int size, absl::Time deadline);

// Where a rank lands after a split: its rank in, and the size of, the group of
// its color.
struct SplitPlacement {
  int rank = 0;
  int size = 0;
};

// The store half of Communicator::Split (MPI_Comm_split semantics): publishes
// (color, key) under `scope`, reads every member's, and ranks the members of
// `color` by (key, old rank). Names the members missing at `deadline`.
absl::StatusOr<SplitPlacement> ExchangeSplitColors(RendezvousStore& store,
                                                   absl::string_view scope,
                                                   int rank, int size,
                                                   int color, int key,
                                                   absl::Time deadline);

}  // namespace monta::comm

#endif  // MONTA_AGENT_COMM_RENDEZVOUS_STORE_H_
