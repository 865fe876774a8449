// A planner's replicas as a client names them (issue 20 item 6): the agent
// (agent/runtime), montactl (client/) and perf/swarm's simulated agents share
// this, so all move between replicas the same way.
//
// A list "a,b,c" of gRPC targets (host:port, or any target gRPC resolves:
// "dns:///name:port", "ipv4:..."). A client talks to current(); after an
// UNAVAILABLE answer (the replica is down, or a follower refusing a
// leader-only call with "not the leader (leader: X)") it calls MoveOn with
// the refusal's message: when a follower named the leader and the leader is
// in the list, that replica is next; otherwise the next one in the list
// (wrapping around). A leader the list does not name is never dialled: the
// list is what the operator trusts.
//
// A DNS name that resolves to several addresses (a Kubernetes headless
// Service): "dns:///monta-planner:7400" with gRPC's round_robin policy
// (UseRoundRobinForDns) sends each call to the next address, so a retry on
// the same target reaches another replica. It fits calls any replica answers
// (reads; their retries) and montactl's one-shot commands; an agent, which
// keeps talking to the leader, takes the replicas' own names instead (each
// pod's DNS name, or addresses) and pick_first.
//
// Not thread-safe: a caller with several threads guards it (the agent).
#ifndef MONTA_COMMON_REPLICAS_ENDPOINTS_H_
#define MONTA_COMMON_REPLICAS_ENDPOINTS_H_

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"

namespace monta::replicas {

// Calls a "dns:" target gets before a call gives up there: with round_robin
// each is another address (the usual three replicas).
inline constexpr int kDnsAttempts = 3;

// The leader a follower names in its refusal, "not the leader (leader: X)";
// empty when the message names none (or "unknown").
std::string LeaderNamed(absl::string_view message);

// True for a target gRPC resolves through DNS ("dns:..." explicitly).
bool IsDnsTarget(absl::string_view target);

// Sets gRPC's round_robin load-balancing policy on `args` when `target` is a
// "dns:" target; leaves them alone otherwise (pick_first, gRPC's default).
void UseRoundRobinForDns(absl::string_view target,
                         grpc::ChannelArguments* args);

// The home replica of a client named `name` among `count` endpoints (an
// agent's heartbeats, server/etcd_store/attachments.h): a hash of the name
// (64-bit FNV-1a, the same in every process and build) modulo `count`, so a
// fleet spreads evenly over the replicas without a balancer. 0 for count 0.
size_t HomeIndex(absl::string_view name, size_t count);

class Endpoints {
 public:
  // `list`: comma-separated targets (spaces around them and empty entries
  // ignored). INVALID_ARGUMENT naming `flag` when it holds none, or a target
  // with a space or control character in it.
  static absl::StatusOr<Endpoints> Parse(absl::string_view list,
                                         absl::string_view flag);

  const std::vector<std::string>& all() const { return endpoints_; }
  size_t size() const { return endpoints_.size(); }
  const std::string& current() const { return endpoints_[index_]; }
  // current()'s position in all().
  size_t index() const { return index_; }

  // After current() answered UNAVAILABLE with `message`: the leader it named
  // when listed (and not current()), else the next target (current() again
  // when there is one). Returns the new current().
  const std::string& MoveOn(absl::string_view message);

  // How many calls one request may take before it gives up: one per target,
  // kDnsAttempts for a "dns:" target, plus one for a named leader.
  int attempts() const;

  // `endpoints` as given (at least one; Parse checks a flag's text), starting
  // at endpoints[start % size] (a client spreading its calls over them).
  explicit Endpoints(std::vector<std::string> endpoints, size_t start = 0)
      : endpoints_(std::move(endpoints)),
        index_(endpoints_.empty() ? 0 : start % endpoints_.size()) {}

 private:
  std::vector<std::string> endpoints_;
  size_t index_;
};

// Makes `call` on endpoints.current(), moving on (MoveOn) after each
// UNAVAILABLE until it answers otherwise or endpoints.attempts() calls were
// made; the last status. `on_move(from, to, status)`, when set, hears each
// move (montactl logs nothing; tests count them).
grpc::Status CallWithFailover(
    Endpoints& endpoints,
    const std::function<grpc::Status(const std::string& endpoint)>& call,
    const std::function<void(const std::string& from, const std::string& to,
                             const grpc::Status& status)>& on_move = {});

// One page of a listing whose pages are chained by page tokens (ListNodes):
// `page_token` ("" for the first page) sent to `endpoint`; the reply's next
// token into *next_page_token ("" after the last page) and the address that
// answered (grpc::ClientContext::peer(); "" when unknown) into *peer. The
// caller keeps the page's items itself.
using PageCall = std::function<grpc::Status(
    const std::string& endpoint, const std::string& page_token,
    std::string* next_page_token, std::string* peer)>;

// A whole listing on one replica. A page token is the replica's that issued
// it and is never sent to another: when a page call moves on (UNAVAILABLE,
// CallWithFailover) to another endpoint, the listing starts over from the
// first page there. Behind one "dns:" name the replica is told by the peer
// that answered: a page from another address than the first page's (the
// token went to another replica behind the name, which this cannot prevent;
// call such a name on a pick_first channel to keep to one) starts the listing
// over too. Each start over calls `restart` (drop the items kept so far).
// After endpoints.attempts() start overs: UNAVAILABLE saying the replica kept
// changing. Otherwise the status of the last page call.
grpc::Status ListAllPages(Endpoints& endpoints, const PageCall& page,
                          const std::function<void()>& restart);

}  // namespace monta::replicas

#endif  // MONTA_COMMON_REPLICAS_ENDPOINTS_H_
