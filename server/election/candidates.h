// The election's keys in etcd, and who leads according to them. Anyone may
// read them (clients, status pages, followers): no Election is needed.
//
// Each replica's candidate key is `<prefix>/election/<replica id>`, on the
// replica's lease, its value what the replica publishes (e.g. its address).
// The candidate with the lowest create revision leads, with that revision as
// its epoch. Keys under `<prefix>/election/` without a lease, or whose name
// is not a valid replica id, are not candidates (a stray key written by hand
// must not block the election).
#ifndef MONTA_SERVER_ELECTION_CANDIDATES_H_
#define MONTA_SERVER_ELECTION_CANDIDATES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/etcd/client.h"

namespace monta::election {

// Candidates read at most (a list beyond it is RESOURCE_EXHAUSTED).
inline constexpr int kMaxCandidates = 1024;
inline constexpr size_t kMaxPrefixBytes = 200;
inline constexpr size_t kMaxReplicaIdBytes = 253;  // a DNS subdomain name
inline constexpr size_t kMaxValueBytes = 4096;

struct Candidate {
  std::string replica_id;
  std::string value;
  // The revision that created the key: the epoch it leads with.
  int64_t create_revision = 0;
  int64_t lease = 0;
};

struct Candidates {
  // Oldest first: by_age[0] leads.
  std::vector<Candidate> by_age;
  // The store's revision the list was read at.
  int64_t revision = 0;
};

// `prefix`: starts with '/', does not end with one, [A-Za-z0-9._/-] only, at
// most kMaxPrefixBytes. `replica_id`: 1..kMaxReplicaIdBytes of
// [A-Za-z0-9._-]. Errors name `field` and never repeat the input.
absl::Status ValidatePrefix(absl::string_view prefix, absl::string_view field);
absl::Status ValidateReplicaId(absl::string_view replica_id,
                               absl::string_view field);

// "<prefix>/election/" and "<prefix>/election/<replica id>".
std::string CandidatesPrefix(absl::string_view prefix);
std::string CandidateKey(absl::string_view prefix,
                         absl::string_view replica_id);

// Every candidate, oldest first, from one linearizable read.
absl::StatusOr<Candidates> ListCandidates(etcd::Client& client,
                                          absl::string_view prefix);

// The candidate that leads now according to etcd (the oldest), or none. It
// may not know it yet (it learns from its own watch within moments), and a
// leader whose lease etcd has not yet expired still shows here after its
// process died: it leads until then, and nobody else does.
absl::StatusOr<std::optional<Candidate>> ReadLeader(etcd::Client& client,
                                                    absl::string_view prefix);

}  // namespace monta::election

#endif  // MONTA_SERVER_ELECTION_CANDIDATES_H_
