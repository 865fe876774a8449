#include "common/replicas/endpoints.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace monta::replicas {
namespace {

constexpr absl::string_view kLeaderIs = "not the leader (leader: ";

}  // namespace

std::string LeaderNamed(absl::string_view message) {
  const size_t at = message.find(kLeaderIs);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = message.substr(at + kLeaderIs.size());
  const size_t end = rest.find(')');
  if (end == absl::string_view::npos) return "";
  const std::string leader(rest.substr(0, end));
  return leader == "unknown" ? "" : leader;
}

size_t HomeIndex(absl::string_view name, size_t count) {
  if (count == 0) return 0;
  uint64_t hash = 14695981039346656037ull;  // FNV-1a's offset basis
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;  // FNV's 64-bit prime
  }
  return static_cast<size_t>(hash % count);
}

bool IsDnsTarget(absl::string_view target) {
  return absl::StartsWith(target, "dns:");
}

void UseRoundRobinForDns(absl::string_view target,
                         grpc::ChannelArguments* args) {
  if (!IsDnsTarget(target)) return;
  args->SetServiceConfigJSON(
      R"({"loadBalancingConfig": [{"round_robin": {}}]})");
}

absl::StatusOr<Endpoints> Endpoints::Parse(absl::string_view list,
                                           absl::string_view flag) {
  std::vector<std::string> endpoints;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (std::any_of(part.begin(), part.end(), [](char c) {
          return absl::ascii_isspace(static_cast<unsigned char>(c)) ||
                 absl::ascii_iscntrl(static_cast<unsigned char>(c));
        })) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag,
          ": expected comma-separated gRPC targets (host:port), got "
          "one with a space or control character in it"));
    }
    endpoints.emplace_back(part);
  }
  if (endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag,
                     ": expected a gRPC target (host:port), or several "
                     "comma-separated, got none"));
  }
  return Endpoints(std::move(endpoints));
}

const std::string& Endpoints::MoveOn(absl::string_view message) {
  const std::string leader = LeaderNamed(message);
  if (!leader.empty() && leader != current()) {
    auto named = std::find(endpoints_.begin(), endpoints_.end(), leader);
    if (named != endpoints_.end()) {
      index_ = named - endpoints_.begin();
      return current();
    }
  }
  index_ = (index_ + 1) % endpoints_.size();
  return current();
}

int Endpoints::attempts() const {
  int attempts = 1;  // a named leader
  for (const std::string& e : endpoints_) {
    attempts += IsDnsTarget(e) ? kDnsAttempts : 1;
  }
  return attempts;
}

grpc::Status CallWithFailover(
    Endpoints& endpoints,
    const std::function<grpc::Status(const std::string& endpoint)>& call,
    const std::function<void(const std::string& from, const std::string& to,
                             const grpc::Status& status)>& on_move) {
  grpc::Status status;
  for (int attempt = 0, limit = endpoints.attempts(); attempt < limit;
       ++attempt) {
    status = call(endpoints.current());
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    if (attempt + 1 == limit) break;
    const std::string from = endpoints.current();
    const std::string& to = endpoints.MoveOn(status.error_message());
    if (on_move) on_move(from, to, status);
  }
  return status;
}

grpc::Status ListAllPages(Endpoints& endpoints, const PageCall& page,
                          const std::function<void()>& restart) {
  std::string token;      // the next page's; "" for the first
  std::string listed_on;  // the endpoint that answered the first page
  std::string listed_peer;
  int restarts = 0;
  const int max_restarts = endpoints.attempts();
  // Drops what was listed; false when the listing started over too often.
  const auto start_over = [&] {
    if (++restarts > max_restarts) return false;
    restart();
    token.clear();
    return true;
  };
  const grpc::Status kept_changing(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("the replica answering the listing changed ", max_restarts,
                   " times (a page token is one replica's); not listing "
                   "again"));
  while (true) {
    std::string next;
    std::string peer;
    bool gave_up = false;
    const grpc::Status status =
        CallWithFailover(endpoints, [&](const std::string& endpoint) {
          if (!token.empty() && endpoint != listed_on && !start_over()) {
            gave_up = true;  // not UNAVAILABLE: CallWithFailover stops
            return grpc::Status(grpc::StatusCode::ABORTED, "");
          }
          next.clear();
          peer.clear();
          return page(endpoint, token, &next, &peer);
        });
    if (gave_up) return kept_changing;
    if (!status.ok()) return status;
    if (token.empty()) {
      listed_on = endpoints.current();
      listed_peer = peer;
    } else if (!peer.empty() && !listed_peer.empty() && peer != listed_peer) {
      // Another address behind the same name answered this page.
      if (!start_over()) return kept_changing;
      continue;
    }
    if (next.empty()) return status;
    token = std::move(next);
  }
}

}  // namespace monta::replicas
