#include "agent/comm/rendezvous_store.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace monta::comm {

absl::Status InMemoryStore::Set(absl::string_view key,
                                absl::string_view value) {
  absl::MutexLock lock(&mu_);
  values_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key,
                                               absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.find(key) != values_.end();
  };
  mu_.AwaitWithDeadline(absl::Condition(&present), deadline);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous key '", key, "' was not set by the deadline"));
  }
  return it->second;
}

FileStore::FileStore(std::string directory)
    : directory_(std::move(directory)) {}

std::string FileStore::PathOf(absl::string_view key) const {
  // Keys contain '/' as scope separators; flatten them into one file name.
  return absl::StrCat(directory_, "/",
                      absl::StrReplaceAll(key, {{"/", "%2F"}}));
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  const std::string path = PathOf(key);
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out.good()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  // rename() is atomic, so a reader sees either no file or the whole value.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key,
                                           absl::Time deadline) {
  const std::string path = PathOf(key);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in.good()) {
      std::ostringstream value;
      value << in.rdbuf();
      return value.str();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key '", key, "' was not set by the deadline"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

PrefixStore::PrefixStore(std::string prefix,
                         std::shared_ptr<RendezvousStore> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(absl::StrCat(prefix_, "/", key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key,
                                             absl::Time deadline) {
  return base_->Get(absl::StrCat(prefix_, "/", key), deadline);
}

absl::Status JoinAll(RendezvousStore& store, absl::string_view scope, int rank,
                     int size, absl::Time deadline) {
  absl::Status set =
      store.Set(absl::StrCat(scope, "/joined/", rank), absl::StrCat(rank));
  if (!set.ok()) return set;
  std::vector<int> missing;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    // After the deadline each remaining Get checks once and returns at once,
    // so every missing rank is found without waiting again.
    absl::StatusOr<std::string> joined =
        store.Get(absl::StrCat(scope, "/joined/", peer), deadline);
    if (joined.ok()) continue;
    if (!absl::IsDeadlineExceeded(joined.status())) return joined.status();
    missing.push_back(peer);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("rank(s) ", absl::StrJoin(missing, ","), " of ", size,
                   " never joined rendezvous '", scope, "' by ",
                   absl::FormatTime(deadline), " (seen from rank ", rank, ")"));
}

absl::StatusOr<SplitPlacement> ExchangeSplitColors(RendezvousStore& store,
                                                   absl::string_view scope,
                                                   int rank, int size,
                                                   int color, int key,
                                                   absl::Time deadline) {
  if (color < 0) {
    return absl::InvalidArgumentError("Split: color must be >= 0");
  }
  absl::Status set = store.Set(absl::StrCat(scope, "/member/", rank),
                               absl::StrCat(color, ",", key));
  if (!set.ok()) return set;
  std::vector<std::pair<int, int>> members;  // (key, old rank) of our color
  std::vector<int> missing;
  for (int peer = 0; peer < size; ++peer) {
    absl::StatusOr<std::string> v =
        store.Get(absl::StrCat(scope, "/member/", peer), deadline);
    if (!v.ok()) {
      if (!absl::IsDeadlineExceeded(v.status())) return v.status();
      missing.push_back(peer);
      continue;
    }
    std::pair<std::string, std::string> parts = absl::StrSplit(*v, ',');
    int peer_color = 0, peer_key = 0;
    if (!absl::SimpleAtoi(parts.first, &peer_color) ||
        !absl::SimpleAtoi(parts.second, &peer_key)) {
      return absl::InternalError(
          absl::StrCat("Split: bad member entry '", *v, "'"));
    }
    if (peer_color == color) members.emplace_back(peer_key, peer);
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Split '", scope, "': rank(s) ", absl::StrJoin(missing, ","), " of ",
        size, " never joined by ", absl::FormatTime(deadline)));
  }
  std::sort(members.begin(), members.end());
  SplitPlacement placement;
  placement.size = static_cast<int>(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank) placement.rank = static_cast<int>(i);
  }
  return placement;
}

}  // namespace monta::comm
