#include "server/election/candidates.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace monta::election {
namespace {

constexpr absl::string_view kElection = "/election/";

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool ValidId(absl::string_view id) {
  return !id.empty() && id.size() <= kMaxReplicaIdBytes &&
         std::all_of(id.begin(), id.end(), IdChar);
}

}  // namespace

absl::Status ValidatePrefix(absl::string_view prefix, absl::string_view field) {
  if (prefix.size() < 2 || prefix.size() > kMaxPrefixBytes ||
      prefix.front() != '/' || prefix.back() == '/' ||
      !std::all_of(prefix.begin(), prefix.end(),
                   [](char c) { return IdChar(c) || c == '/'; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected an etcd key prefix such as \"/monta\": 2..",
        kMaxPrefixBytes,
        " bytes of [A-Za-z0-9._/-], starting with '/' and not ending "
        "with one (got ",
        prefix.size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateReplicaId(absl::string_view replica_id,
                               absl::string_view field) {
  if (!ValidId(replica_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a replica id of 1..", kMaxReplicaIdBytes,
        " bytes of [A-Za-z0-9._-] such as a pod name (got ", replica_id.size(),
        " bytes)"));
  }
  return absl::OkStatus();
}

std::string CandidatesPrefix(absl::string_view prefix) {
  return absl::StrCat(prefix, kElection);
}

std::string CandidateKey(absl::string_view prefix,
                         absl::string_view replica_id) {
  return absl::StrCat(prefix, kElection, replica_id);
}

absl::StatusOr<Candidates> ListCandidates(etcd::Client& client,
                                          absl::string_view prefix) {
  if (absl::Status s = ValidatePrefix(prefix, "prefix"); !s.ok()) return s;
  etcd::ListRequest request;
  request.key = CandidatesPrefix(prefix);
  request.range_end = etcd::PrefixEnd(request.key);
  request.page_size = kMaxCandidates;
  absl::StatusOr<etcd::RangeResult> listed =
      client.List(request, kMaxCandidates);
  if (!listed.ok()) return listed.status();
  Candidates out;
  out.revision = listed->revision;
  for (etcd::KeyValue& kv : listed->kvs) {
    absl::string_view id = kv.key;
    id.remove_prefix(request.key.size());
    if (kv.lease == 0 || !ValidId(id)) continue;
    Candidate c;
    c.replica_id = std::string(id);
    c.value = std::move(kv.value);
    c.create_revision = kv.create_revision;
    c.lease = kv.lease;
    out.by_age.push_back(std::move(c));
  }
  std::sort(out.by_age.begin(), out.by_age.end(),
            [](const Candidate& a, const Candidate& b) {
              return a.create_revision < b.create_revision;
            });
  return out;
}

absl::StatusOr<std::optional<Candidate>> ReadLeader(etcd::Client& client,
                                                    absl::string_view prefix) {
  absl::StatusOr<Candidates> candidates = ListCandidates(client, prefix);
  if (!candidates.ok()) return candidates.status();
  if (candidates->by_age.empty()) return std::nullopt;
  return std::move(candidates->by_age.front());
}

}  // namespace monta::election
