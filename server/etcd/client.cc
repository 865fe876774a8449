#include "server/etcd/client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/etcd/internal.h"
#include "server/etcd/lease_keepalive.h"
#include "server/etcd/watch.h"

namespace monta::etcd {
namespace {

constexpr size_t kMaxEndpoints = 16;
constexpr char kOutcomeUnknownUrl[] = "monta.etcd/outcome-unknown";
constexpr int64_t kMaxPageSize = 10000;
// etcd's MaxLeaseTTL (lease/lessor.go).
constexpr int64_t kMaxLeaseTtlSeconds = 9000000000;

int Milliseconds(absl::Duration d) {
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d), 1 << 30));
}

// One attempt of a unary call: `method` of the endpoint's `stub`, with the
// `hasleader` metadata and the attempt's deadline.
template <typename Stub, typename Request, typename Response>
auto Rpc(absl::string_view what, std::unique_ptr<Stub> Endpoint::*stub,
         grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                      Response*),
         const Request& request, Response* response) {
  return [=, &request](Endpoint& e, absl::Duration timeout) {
    grpc::ClientContext context;
    PrepareContext(context, timeout);
    return CallStatus(((*(e.*stub)).*method)(&context, request, response), what,
                      e.address);
  };
}

// "host:port", optionally after http:// (plaintext) or https:// (TLS).
absl::StatusOr<std::string> ParseEndpoint(absl::string_view endpoint,
                                          bool insecure) {
  absl::string_view rest = endpoint;
  if (absl::ConsumePrefix(&rest, "https://")) {
    if (insecure) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd_endpoints: ", endpoint,
                       ": https:// with plaintext (insecure) transport"));
    }
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    if (!insecure) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd_endpoints: ", endpoint, ": http:// with mutual TLS"));
    }
  }
  absl::ConsumeSuffix(&rest, "/");
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd_endpoints: ", endpoint.substr(0, 256),
                     ": expected host:port (port 1..65535)"));
  }
  return std::string(rest);
}

absl::Status ValidateOptions(const ClientOptions& options) {
  if (options.endpoints.empty() || options.endpoints.size() > kMaxEndpoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd_endpoints: expected 1..", kMaxEndpoints,
                     " endpoints, got ", options.endpoints.size()));
  }
  if (options.request_timeout <= absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "etcd request_timeout and connect_timeout must be positive");
  }
  if (options.keepalive_time < absl::Seconds(5) ||
      options.keepalive_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "etcd keepalive_time must be >= 5s (etcd answers more frequent pings "
        "with GOAWAY, --grpc-keepalive-min-time) and keepalive_timeout "
        "positive");
  }
  if (options.max_request_bytes <= kRaftEnvelopeBytes ||
      options.max_txn_ops < 1 || options.max_response_bytes < 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd limits: max_request_bytes must exceed ", kRaftEnvelopeBytes,
        ", max_txn_ops be >= 1 and max_response_bytes >= 4096"));
  }
  if (options.min_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.min_backoff) {
    return absl::InvalidArgumentError(
        "etcd backoff: expected 0 < min_backoff <= max_backoff");
  }
  return ValidateGrpcSecurity(options.security);
}

grpc::ChannelArguments ChannelArgs(const ClientOptions& options) {
  grpc::ChannelArguments args;
  // Each client its own connections: one client's broken connection (a test
  // stops a member) is not another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              Milliseconds(options.keepalive_timeout));
  // Pings only while a call or stream is open (etcd's default policy
  // refuses others), as many as needed on an idle watch stream.
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A member back from a restart is reconnected to within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(options.max_response_bytes);
  return args;
}

}  // namespace

bool OutcomeUnknown(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kOutcomeUnknownUrl).has_value();
}

GrpcSecurityOptions ClientOptions::DefaultSecurity() {
  GrpcSecurityOptions security;
  security.flag_prefix = "--etcd_tls_";
  security.insecure_flag = "--etcd_insecure";
  return security;
}

Client::Client(ClientOptions options) : options_(std::move(options)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  std::vector<std::string> addresses;
  for (const std::string& endpoint : options.endpoints) {
    absl::StatusOr<std::string> address =
        ParseEndpoint(endpoint, options.security.insecure);
    if (!address.ok()) return address.status();
    addresses.push_back(*std::move(address));
  }
  const grpc::ChannelArguments args = ChannelArgs(options);
  std::unique_ptr<Client> client(new Client(std::move(options)));
  for (const std::string& address : addresses) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = address;
    endpoint->channel = grpc::CreateCustomChannel(address, *credentials, args);
    endpoint->kv = etcdserverpb::KV::NewStub(endpoint->channel);
    endpoint->lease = etcdserverpb::Lease::NewStub(endpoint->channel);
    endpoint->watch = etcdserverpb::Watch::NewStub(endpoint->channel);
    client->endpoints_.push_back(std::move(endpoint));
  }
  return client;
}

std::string Client::preferred_endpoint() const {
  absl::MutexLock lock(&mu_);
  return endpoints_[preferred_]->address;
}

void Client::Prefer(const Endpoint& endpoint) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i].get() == &endpoint) preferred_ = i;
  }
}

size_t Client::preferred_index() const {
  absl::MutexLock lock(&mu_);
  return preferred_;
}

Endpoint& Client::endpoint_at(size_t cursor) const {
  return *endpoints_[cursor % endpoints_.size()];
}

void Client::MoveOff(size_t index) {
  absl::MutexLock lock(&mu_);
  if (preferred_ == index) preferred_ = (index + 1) % endpoints_.size();
}

std::vector<size_t> Client::AttemptOrder() const {
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = preferred_;
  }
  std::vector<size_t> order;
  std::vector<size_t> failed;
  const size_t n = endpoints_.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (first + i) % n;
    const grpc_connectivity_state state =
        endpoints_[index]->channel->GetState(/*try_to_connect=*/false);
    (state == GRPC_CHANNEL_TRANSIENT_FAILURE ? failed : order).push_back(index);
  }
  order.insert(order.end(), failed.begin(), failed.end());
  return order;
}

bool Client::Connect(Endpoint& endpoint, MonoTime until,
                     bool wait_in_failure) const {
  const MonoTime deadline = std::min(
      until,
      MonoAfter(std::chrono::steady_clock::now(), options_.connect_timeout));
  bool attempted = false;
  while (true) {
    const grpc_connectivity_state state =
        endpoint.channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    if (state == GRPC_CHANNEL_CONNECTING) attempted = true;
    // A connection attempt made during this wait failed: the member is down
    // (a refused connection fails at once; no need to wait out the timeout).
    // A channel already in TRANSIENT_FAILURE stays there until it connects
    // (gRPC retries in the background and reports no other state meanwhile),
    // so waiting for a change would wait out the whole timeout on a dead
    // member: it is skipped unless the caller has nowhere else to go.
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE &&
        (attempted || !wait_in_failure)) {
      return false;
    }
    if (state == GRPC_CHANNEL_SHUTDOWN) return false;
    const absl::Duration remaining =
        MonoSince(std::chrono::steady_clock::now(), deadline);
    if (remaining <= absl::ZeroDuration()) return false;
    if (!endpoint.channel->WaitForStateChange(state, GrpcDeadline(remaining))) {
      return false;
    }
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) attempted = true;
  }
}

absl::Status Client::Call(
    absl::string_view what, Retry retry,
    const std::function<absl::Status(Endpoint&, absl::Duration)>& attempt,
    MonoTime deadline) {
  std::vector<std::string> failures;
  // Whether an endpoint connected during this call: until one has, an
  // endpoint whose connection failed earlier is waited for (all may be
  // restarting); after, it is skipped at once.
  bool reached = false;
  for (size_t index : AttemptOrder()) {
    Endpoint& endpoint = *endpoints_[index];
    const absl::Duration left =
        MonoSince(std::chrono::steady_clock::now(), deadline);
    if (left <= absl::ZeroDuration()) {
      failures.push_back(absl::StrCat(endpoint.address, ": not tried"));
      return absl::DeadlineExceededError(
          absl::StrCat("etcd ", what, ": deadline passed (",
                       absl::StrJoin(failures, "; "), ")"));
    }
    if (!Connect(endpoint, deadline, /*wait_in_failure=*/!reached)) {
      // Nothing was sent: safe to go on, for writes too.
      failures.push_back(absl::StrCat(endpoint.address, ": not connected"));
      MoveOff(index);
      continue;
    }
    reached = true;
    absl::Status status = attempt(
        endpoint,
        std::min(options_.request_timeout,
                 MonoSince(std::chrono::steady_clock::now(), deadline)));
    if (status.ok()) {
      Prefer(endpoint);
      return status;
    }
    const bool transient =
        absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
    if (!transient) return status;
    // The member died, lost its leader or let the deadline pass: the next
    // call starts at the next one.
    MoveOff(index);
    if (retry == Retry::kWrite && !IsNoLeader(status)) {
      absl::Status unknown(
          status.code(),
          absl::StrCat(status.message(),
                       " (outcome unknown: the write may have been applied)"));
      unknown.SetPayload(kOutcomeUnknownUrl, absl::Cord("1"));
      return unknown;
    }
    failures.push_back(std::string(status.message()));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd ", what, ": no endpoint answered (",
                   absl::StrJoin(failures, "; "), ")"));
}

absl::Status Client::CheckRequestSize(absl::string_view what,
                                      size_t bytes) const {
  const int64_t limit = options_.max_request_bytes - kRaftEnvelopeBytes;
  if (static_cast<int64_t>(bytes) > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd ", what, ": request of ", bytes, " bytes exceeds etcd's limit (",
        limit, " bytes: --max-request-bytes ", options_.max_request_bytes,
        " minus ", kRaftEnvelopeBytes,
        " for its raft envelope); not sent. Split the write."));
  }
  return absl::OkStatus();
}

absl::StatusOr<RangeResult> Client::Range(const RangeRequest& request) {
  if (request.key.empty()) {
    return absl::InvalidArgumentError("etcd Range: key must not be empty");
  }
  if (request.revision < 0 || request.limit < 0) {
    return absl::InvalidArgumentError(
        "etcd Range: revision and limit must be >= 0");
  }
  etcdserverpb::RangeRequest proto;
  ToProto(request, &proto);
  etcdserverpb::RangeResponse response;
  absl::Status status =
      Call("Range", Retry::kRead,
           Rpc("Range", &Endpoint::kv, &etcdserverpb::KV::Stub::Range, proto,
               &response));
  if (!status.ok()) return status;
  return FromProto(response);
}

absl::StatusOr<RangeResult> Client::Get(const std::string& key) {
  RangeRequest request;
  request.key = key;
  return Range(request);
}

absl::StatusOr<int64_t> Client::ListPages(
    const ListRequest& request,
    const std::function<absl::Status(std::vector<KeyValue> page)>& on_page) {
  if (request.page_size < 1 || request.page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd List: page_size must be 1..", kMaxPageSize, ", got ",
                     request.page_size));
  }
  RangeRequest range;
  range.key = request.key;
  range.range_end = request.range_end;
  range.revision = request.revision;
  // A single key (no range end) is one page.
  range.limit = request.range_end.empty() ? 0 : request.page_size;
  while (true) {
    absl::StatusOr<RangeResult> page = Range(range);
    if (!page.ok()) return page.status();
    // Every later page reads the store as of the first.
    if (range.revision == 0) range.revision = page->revision;
    if (page->kvs.empty()) break;
    std::string next = page->kvs.back().key;
    next.push_back('\0');
    if (absl::Status s = on_page(std::move(page->kvs)); !s.ok()) return s;
    if (!page->more || range.limit == 0) break;
    range.key = std::move(next);
  }
  return range.revision;
}

absl::StatusOr<RangeResult> Client::List(const ListRequest& request,
                                         size_t max_keys) {
  RangeResult all;
  absl::StatusOr<int64_t> revision =
      ListPages(request, [&](std::vector<KeyValue> page) {
        if (all.kvs.size() + page.size() > max_keys) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "etcd List: more than ", max_keys, " keys in the range"));
        }
        for (KeyValue& kv : page) all.kvs.push_back(std::move(kv));
        return absl::OkStatus();
      });
  if (!revision.ok()) return revision.status();
  all.revision = *revision;
  all.count = static_cast<int64_t>(all.kvs.size());
  return all;
}

absl::StatusOr<PutResult> Client::Put(const std::string& key,
                                      const std::string& value, int64_t lease,
                                      bool prev_kv) {
  if (key.empty()) {
    return absl::InvalidArgumentError("etcd Put: key must not be empty");
  }
  etcdserverpb::PutRequest proto;
  proto.set_key(key);
  proto.set_value(value);
  proto.set_lease(lease);
  proto.set_prev_kv(prev_kv);
  if (absl::Status s = CheckRequestSize("Put", proto.ByteSizeLong()); !s.ok()) {
    return s;
  }
  etcdserverpb::PutResponse response;
  absl::Status status =
      Call("Put", Retry::kWrite,
           Rpc("Put", &Endpoint::kv, &etcdserverpb::KV::Stub::Put, proto,
               &response));
  if (!status.ok()) return status;
  return FromProto(response);
}

absl::StatusOr<DeleteResult> Client::Delete(const std::string& key,
                                            const std::string& range_end,
                                            bool prev_kv) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        "etcd DeleteRange: key must not be empty");
  }
  etcdserverpb::DeleteRangeRequest proto;
  proto.set_key(key);
  proto.set_range_end(range_end);
  proto.set_prev_kv(prev_kv);
  if (absl::Status s = CheckRequestSize("DeleteRange", proto.ByteSizeLong());
      !s.ok()) {
    return s;
  }
  etcdserverpb::DeleteRangeResponse response;
  absl::Status status =
      Call("DeleteRange", Retry::kWrite,
           Rpc("DeleteRange", &Endpoint::kv,
               &etcdserverpb::KV::Stub::DeleteRange, proto, &response));
  if (!status.ok()) return status;
  return FromProto(response);
}

namespace {

absl::Status CheckTxnShape(const TxnRequest& txn, int max_ops) {
  const std::pair<const char*, size_t> lists[] = {
      {"compares", txn.compares.size()},
      {"success operations", txn.success.size()},
      {"failure operations", txn.failure.size()}};
  for (const auto& [name, size] : lists) {
    if (size > static_cast<size_t>(max_ops)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd Txn: ", size, " ", name, " exceed etcd's limit of ", max_ops,
          " per list (--max-txn-ops); not sent. Split the transaction."));
    }
  }
  for (const Compare& c : txn.compares) {
    if (c.key.empty()) {
      return absl::InvalidArgumentError("etcd Txn: a compare has an empty key");
    }
  }
  for (const std::vector<Op>* ops : {&txn.success, &txn.failure}) {
    for (const Op& op : *ops) {
      if (op.key.empty()) {
        return absl::InvalidArgumentError(
            "etcd Txn: an operation has an empty key");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TxnResult> Client::Txn(const TxnRequest& txn) {
  return Txn(txn, MonoTime::max());
}

absl::StatusOr<TxnResult> Client::Txn(const TxnRequest& txn,
                                      MonoTime deadline) {
  if (absl::Status s = CheckTxnShape(txn, options_.max_txn_ops); !s.ok()) {
    return s;
  }
  etcdserverpb::TxnRequest proto;
  ToProto(txn, &proto);
  if (absl::Status s = CheckRequestSize("Txn", proto.ByteSizeLong()); !s.ok()) {
    return s;
  }
  etcdserverpb::TxnResponse response;
  absl::Status status = Call(
      "Txn", Retry::kWrite,
      Rpc("Txn", &Endpoint::kv, &etcdserverpb::KV::Stub::Txn, proto, &response),
      deadline);
  if (!status.ok()) return status;
  return FromProto(response);
}

absl::Status Client::Compact(int64_t revision, bool physical) {
  if (revision < 1) {
    return absl::InvalidArgumentError("etcd Compact: revision must be >= 1");
  }
  etcdserverpb::CompactionRequest proto;
  proto.set_revision(revision);
  proto.set_physical(physical);
  etcdserverpb::CompactionResponse response;
  return Call("Compact", Retry::kWrite,
              Rpc("Compact", &Endpoint::kv, &etcdserverpb::KV::Stub::Compact,
                  proto, &response));
}

absl::StatusOr<Lease> Client::GrantLease(absl::Duration ttl) {
  const int64_t seconds =
      absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)));
  if (seconds < 1 || seconds > kMaxLeaseTtlSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd LeaseGrant: ttl must be 1..", kMaxLeaseTtlSeconds,
                     " s, got ", absl::FormatDuration(ttl)));
  }
  etcdserverpb::LeaseGrantRequest proto;
  proto.set_ttl(seconds);
  etcdserverpb::LeaseGrantResponse response;
  // Before the first attempt: etcd's expiry can only be later.
  const MonoTime sent = std::chrono::steady_clock::now();
  absl::Status status =
      Call("LeaseGrant", Retry::kWrite,
           Rpc("LeaseGrant", &Endpoint::lease,
               &etcdserverpb::Lease::Stub::LeaseGrant, proto, &response));
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd LeaseGrant: ", response.error().substr(0, 256)));
  }
  Lease lease;
  lease.id = response.id();
  lease.ttl_seconds = response.ttl();
  lease.expiry = MonoAfter(sent, absl::Seconds(response.ttl()));
  return lease;
}

absl::Status Client::RevokeLease(int64_t id) {
  etcdserverpb::LeaseRevokeRequest proto;
  proto.set_id(id);
  etcdserverpb::LeaseRevokeResponse response;
  return Call("LeaseRevoke", Retry::kWrite,
              Rpc("LeaseRevoke", &Endpoint::lease,
                  &etcdserverpb::Lease::Stub::LeaseRevoke, proto, &response));
}

absl::StatusOr<LeaseStatus> Client::LeaseTimeToLive(int64_t id, bool keys) {
  etcdserverpb::LeaseTimeToLiveRequest proto;
  proto.set_id(id);
  proto.set_keys(keys);
  etcdserverpb::LeaseTimeToLiveResponse response;
  absl::Status status =
      Call("LeaseTimeToLive", Retry::kRead,
           Rpc("LeaseTimeToLive", &Endpoint::lease,
               &etcdserverpb::Lease::Stub::LeaseTimeToLive, proto, &response));
  if (!status.ok()) return status;
  LeaseStatus out;
  out.id = response.id();
  out.ttl_seconds = response.ttl();
  out.granted_ttl_seconds = response.grantedttl();
  for (const std::string& key : response.keys()) out.keys.push_back(key);
  return out;
}

absl::StatusOr<std::unique_ptr<LeaseKeepAlive>> Client::KeepAlive(
    const Lease& lease, std::function<void(const absl::Status&)> on_lost) {
  if (lease.id == 0 || lease.ttl_seconds < 1) {
    return absl::InvalidArgumentError(
        "etcd KeepAlive: expected a granted lease (id != 0, ttl >= 1 s)");
  }
  return std::unique_ptr<LeaseKeepAlive>(
      new LeaseKeepAlive(this, lease, std::move(on_lost)));
}

absl::StatusOr<std::unique_ptr<Watch>> Client::OpenWatch(
    const WatchOptions& options) {
  if (options.key.empty()) {
    return absl::InvalidArgumentError("etcd Watch: key must not be empty");
  }
  if (options.start_revision < 0 || options.max_queued_events < 1) {
    return absl::InvalidArgumentError(
        "etcd Watch: start_revision must be >= 0 and max_queued_events >= 1");
  }
  return std::unique_ptr<Watch>(new Watch(this, options));
}

}  // namespace monta::etcd
