#include "server/registry/registry.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/nic_state.h"
#include "google/protobuf/util/time_util.h"
#include "server/registry/topology_validation.h"

namespace monta::registry {
namespace {

using google::protobuf::util::TimeUtil;
using monta::v1::BandwidthCurve;
using monta::v1::NodeInfo;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

// Keeps the newest `max_events` events (the ring's oldest go first).
void TrimEvents(NodeInfo& info, int max_events) {
  auto* events = info.mutable_events();
  const int excess = events->size() - std::max(0, max_events);
  if (excess > 0) events->DeleteSubrange(0, excess);
}

// Keeps `topology` as the node's, with every NIC's *_kind filled from its raw
// text where the agent left it unspecified (an agent older than the enums),
// so readers of NodeInfo find the enums set.
void StoreTopology(const monta::v1::NodeTopology& topology, NodeInfo& info) {
  *info.mutable_topology() = topology;
  for (monta::v1::Nic& nic : *info.mutable_topology()->mutable_nics()) {
    nic_state::FillKinds(nic);
  }
}

// ListNodes' page tokens: the last name of the page, so a node added or
// removed between pages moves nothing else.
constexpr absl::string_view kPageTokenPrefix = "after:";

std::string PageToken(absl::string_view last_name) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPageTokenPrefix, last_name));
}

absl::StatusOr<std::string> NameAfterToken(absl::string_view token) {
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(token, &decoded) ||
      !absl::StartsWith(decoded, kPageTokenPrefix)) {
    return absl::InvalidArgumentError(
        "page_token: not a next_page_token of ListNodes");
  }
  return decoded.substr(kPageTokenPrefix.size());
}

absl::Status ValidateInstanceId(absl::string_view id) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError(
        "instance_id: expected 1..128 characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateRegisterRequest(const monta::v1::RegisterRequest& request,
                                     const TopologyLimits& limits) {
  if (absl::Status s = ValidateNodeName(request.node_name()); !s.ok()) return s;
  if (absl::Status s = ValidateInstanceId(request.instance_id()); !s.ok())
    return s;
  if (request.agent_version().size() > 128) {
    return absl::InvalidArgumentError(
        "agent_version: expected at most 128 characters");
  }
  if (request.bench_address().size() > 255) {
    return absl::InvalidArgumentError(
        "bench_address: expected a host or address of at most 255 characters");
  }
  return ValidateTopology(request.topology(), limits);
}

}  // namespace

absl::Status ValidateNodeName(absl::string_view name) {
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_name: expected 1..253 characters, got ", name.size()));
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("node_name: expected a DNS subdomain ([a-z0-9.-]), got ",
                       EchoInput(name)));
    }
  }
  if (!alnum(name.front()) || !alnum(name.back())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_name: must start and end with [a-z0-9], got ", EchoInput(name)));
  }
  return absl::OkStatus();
}

double NicLineRate(const monta::v1::NodeTopology& topology) {
  double bytes_per_second = 0;
  for (const auto& nic : topology.nics()) {
    if (nic_state::CountsAsUp(nic))
      bytes_per_second += nic.rate_bytes_per_second();
  }
  return bytes_per_second;
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    host = host.substr(1, host.find(']') == absl::string_view::npos
                              ? absl::string_view::npos
                              : host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));  // host:port
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

std::string CurveKey(const BandwidthCurve& c) {
  return absl::StrCat(c.collective(), "|", c.scope(), "|", c.backend(), "|",
                      CurveStrategyName(c.strategy_kind()), "|", c.chunks(),
                      "|", c.nranks(), "|", absl::StrJoin(c.nodes(), ","));
}

Registry::Registry(RegistryOptions options, TopologyDiffer differ)
    : options_(options), differ_(std::move(differ)) {}

const char* ChangeOperation(Change::Kind kind) {
  switch (kind) {
    case Change::Kind::kNode:
    case Change::Kind::kNodeRemoved:
      return "node";
    case Change::Kind::kCurve:
    case Change::Kind::kCurvesForgotten:
      return "curve";
  }
  return "node";
}

void Registry::SetObserver(RegistryObserver* observer) {
  absl::MutexLock deliver(&deliver_mu_);
  absl::MutexLock lock(&mu_);
  observer_ = observer;
  observed_ = observer != nullptr;
  if (observed_ && !threaded_) {
    threaded_ = true;
    delivery_thread_ = std::thread([this] { DeliveryLoop(); });
  }
}

bool Registry::Queue(Change change) {
  if (!observed_) return false;
  if (change.kind != Change::Kind::kNode) {
    pending_node_.clear();  // a node's changes keep their order around it
    pending_.push_back(std::move(change));
    ++queued_total_;
    return true;
  }
  auto [it, added] =
      pending_node_.try_emplace(change.node.name(), pending_.size());
  if (added) {
    pending_.push_back(std::move(change));
    ++queued_total_;
  } else {
    pending_[it->second] = std::move(change);  // its newest state wins
  }
  return true;
}

bool Registry::QueueAt(Change change, Instant now) {
  const uint64_t before = queued_total_;
  if (!Queue(std::move(change))) return false;
  if (queued_total_ != before) queued_at_.emplace_back(queued_total_, now.mono);
  return true;
}

void Registry::DropDeliveredStampsLocked() {
  while (!queued_at_.empty() && queued_at_.front().first <= delivered_total_) {
    queued_at_.pop_front();
  }
}

absl::Status Registry::AdmitCount(absl::string_view what) const {
  const size_t waiting = pending_.size() + delivering_;
  if (!observed_ || options_.max_pending_changes <= 0 ||
      waiting < static_cast<size_t>(options_.max_pending_changes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " refused: the planner is overloaded, ", waiting,
      " registry changes wait for its store (at most ",
      options_.max_pending_changes,
      ", --max_pending_registry_changes); nothing changed, retry after a "
      "backoff"));
}

absl::Status Registry::Admit(absl::string_view node_name,
                             absl::string_view what, Instant now) const {
  if (!observed_ || pending_node_.find(node_name) != pending_node_.end()) {
    return absl::OkStatus();
  }
  const size_t waiting = pending_.size() + delivering_;
  if (absl::Status s = AdmitCount(what); !s.ok()) return s;
  if (options_.max_pending_wait > absl::ZeroDuration() && !queued_at_.empty()) {
    const absl::Duration behind =
        MonoSince(queued_at_.front().second, now.mono);
    if (behind > options_.max_pending_wait) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " refused: the planner is overloaded, its store is ",
          absl::FormatDuration(behind), " behind (", waiting,
          " registry changes wait; at most ",
          absl::FormatDuration(options_.max_pending_wait),
          "); nothing changed, retry after a backoff"));
    }
  }
  return absl::OkStatus();
}

int Registry::PendingChanges() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(pending_.size() + delivering_);
}

Registry::~Registry() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (delivery_thread_.joinable()) delivery_thread_.join();
}

void Registry::Deliver() {
  {
    absl::MutexLock deliver(&deliver_mu_);
    DeliverLocked();
  }
  RunDelivered();
}

bool Registry::DeliveryDue() const { return stopping_ || !waiters_.empty(); }

void Registry::DeliveryLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Registry::DeliveryDue));
      if (waiters_.empty()) return;  // stopping
    }
    // One batch at a time, its callers answered before the next: while
    // registrations keep coming the queue may never drain, and a caller whose
    // change is stored should not wait for it (its call would time out and
    // be retried, a second write of the same node).
    {
      absl::MutexLock deliver(&deliver_mu_);
      // No kCurvesForgotten among them: Forget delivers its own change.
      std::vector<BandwidthCurve> restored;
      DeliverBatchLocked(restored);
    }
    RunDelivered();
  }
}

void Registry::RunDelivered() {
  std::vector<std::function<void(absl::Status)>> ready;
  {
    absl::MutexLock lock(&mu_);
    while (!waiters_.empty() && waiters_.front().first <= delivered_total_) {
      ready.push_back(std::move(waiters_.front().second));
      waiters_.pop_front();
    }
  }
  for (auto& done : ready) done(absl::OkStatus());
}

std::vector<Change> Registry::TakeBatchLocked() {
  std::vector<Change> batch;
  const size_t most =
      options_.max_changes_per_delivery > 0
          ? static_cast<size_t>(options_.max_changes_per_delivery)
          : pending_.size();
  if (pending_.size() <= most) {
    batch.swap(pending_);
    pending_node_.clear();
    return batch;
  }
  batch.assign(std::make_move_iterator(pending_.begin()),
               std::make_move_iterator(pending_.begin() + most));
  pending_.erase(pending_.begin(), pending_.begin() + most);
  // A node whose change goes now gets a new entry for its next change; the
  // others keep theirs, moved up.
  for (auto it = pending_node_.begin(); it != pending_node_.end();) {
    if (it->second < most) {
      it = pending_node_.erase(it);
    } else {
      it->second -= most;
      ++it;
    }
  }
  return batch;
}

bool Registry::DeliverBatchLocked(std::vector<BandwidthCurve>& restored) {
  std::vector<Change> batch;
  {
    absl::MutexLock lock(&mu_);
    batch = TakeBatchLocked();
    if (observer_ == nullptr) {  // nobody to hand them to
      delivered_total_ += batch.size();
      batch.clear();
      DropDeliveredStampsLocked();
    }
    delivering_ = batch.size();
  }
  // Another caller's Deliver may have taken this caller's changes already:
  // they were delivered before deliver_mu_ came free.
  if (batch.empty()) return false;
  for (BandwidthCurve& c : observer_->Changed(batch)) {
    restored.push_back(std::move(c));
  }
  absl::MutexLock lock(&mu_);
  delivering_ = 0;
  delivered_total_ += batch.size();
  DropDeliveredStampsLocked();
  return true;
}

std::vector<BandwidthCurve> Registry::DeliverLocked() {
  std::vector<BandwidthCurve> restored;
  while (DeliverBatchLocked(restored)) {
  }
  return restored;
}

absl::Status Registry::Register(const monta::v1::RegisterRequest& request,
                                Instant now) {
  if (absl::Status s =
          ValidateRegisterRequest(request, options_.topology_limits);
      !s.ok())
    return s;
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Admit(request.node_name(), "Register", now); !s.ok())
      return s;
    absl::Status registered = RegisterLocked(request, now, &queued);
    if (!registered.ok()) return registered;
  }
  if (queued) Deliver();
  return absl::OkStatus();
}

void Registry::RegisterThen(const monta::v1::RegisterRequest& request,
                            Instant now,
                            std::function<void(absl::Status)> done) {
  absl::Status status =
      ValidateRegisterRequest(request, options_.topology_limits);
  bool queued = false;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = Admit(request.node_name(), "Register", now);
    if (status.ok()) status = RegisterLocked(request, now, &queued);
    if (status.ok() && queued && threaded_) {
      // Done once every change queued so far (this one among them) is handed
      // over: the delivery thread batches the waiting registrations.
      waiters_.emplace_back(queued_total_, std::move(done));
      return;
    }
  }
  if (queued) Deliver();
  done(status);
}

absl::Status Registry::RegisterLocked(const monta::v1::RegisterRequest& request,
                                      Instant now, bool* queued) {
  auto it = nodes_.find(request.node_name());
  if (it != nodes_.end()) {
    Entry& entry = it->second;
    if (Alive(entry, now) &&
        entry.info.instance_id() != request.instance_id()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "node_name ", EchoInput(request.node_name()),
          " is held by another agent instance whose lease is alive (",
          HeardAlive(entry, now)
              ? absl::StrCat(
                    "last heartbeat ",
                    absl::FormatDuration(MonoSince(*entry.heard, now.mono)),
                    " ago")
              : std::string("heartbeating to another planner replica"),
          "); stop that agent or wait for its lease (",
          absl::FormatDuration(options_.lease), ") to expire"));
    }
  }
  Entry& entry = nodes_[request.node_name()];
  const bool is_new = entry.info.name().empty();
  entry.info.set_name(request.node_name());
  entry.info.set_instance_id(request.instance_id());
  entry.info.set_agent_version(request.agent_version());
  entry.info.set_bench_address(request.bench_address());
  entry.registered_at = now.wall;
  entry.last_heartbeat = now.wall;
  entry.heard = now.mono;
  entry.quiet_since = now.mono;
  entry.gone = false;
  if (is_new) {
    StoreTopology(request.topology(), entry.info);
  } else {
    RecordTopology(entry, request.topology(), now);
  }
  *queued = Notify(entry, now);
  return absl::OkStatus();
}

absl::Status Registry::Heartbeat(const monta::v1::HeartbeatRequest& request,
                                 Instant now) {
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    absl::Status beat = HeartbeatLocked(request, now, &queued);
    if (!beat.ok()) return beat;
  }
  if (queued) Deliver();
  return absl::OkStatus();
}

absl::Status Registry::HeartbeatLocked(
    const monta::v1::HeartbeatRequest& request, Instant now, bool* queued) {
  auto it = nodes_.find(request.node_name());
  if (it == nodes_.end() || it->second.gone) {
    return absl::NotFoundError(
        absl::StrCat("node ", EchoInput(request.node_name()),
                     " is not registered; register again"));
  }
  Entry& entry = it->second;
  if (entry.info.instance_id() != request.instance_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", EchoInput(request.node_name()),
                     " is held by another agent instance"));
  }
  // Only a topology with events queues a change: refused over the bound
  // before the lease is renewed (the agent retries the whole heartbeat).
  if (request.has_topology()) {
    if (absl::Status s = Admit(request.node_name(), "Heartbeat", now);
        !s.ok() && differ_ != nullptr &&
        ValidateTopology(request.topology(), options_.topology_limits).ok() &&
        !differ_(entry.info.topology(), request.topology()).empty()) {
      return s;
    }
  }
  entry.last_heartbeat = now.wall;
  entry.heard = now.mono;
  entry.quiet_since = now.mono;
  if (request.has_topology()) {
    if (absl::Status s =
            ValidateTopology(request.topology(), options_.topology_limits);
        !s.ok())
      return s;
    const int events_before = entry.info.events_size();
    RecordTopology(entry, request.topology(), now);
    // Persist only real changes: heartbeats are the hot path.
    if (entry.info.events_size() != events_before) {
      *queued = Notify(entry, now);
    }
  }
  return absl::OkStatus();
}

absl::Status Registry::Deregister(absl::string_view node_name,
                                  absl::string_view instance_id, Instant now) {
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node_name);
    if (it == nodes_.end()) {
      return absl::NotFoundError(
          absl::StrCat("node ", EchoInput(node_name), " is not registered"));
    }
    Entry& entry = it->second;
    if (entry.info.instance_id() != instance_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", EchoInput(node_name), " is held by another agent instance"));
    }
    if (absl::Status s = Admit(node_name, "Deregister", now); !s.ok()) return s;
    entry.gone = true;
    entry.quiet_since = now.mono;
    queued = Notify(entry, now);
  }
  if (queued) Deliver();
  return absl::OkStatus();
}

bool Registry::IsAlive(absl::string_view node_name,
                       absl::string_view instance_id, Instant now) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) return false;
  const Entry& e = it->second;
  return e.info.instance_id() == instance_id && Alive(e, now);
}

bool Registry::HeardAlive(const Entry& entry, Instant now) const {
  return !entry.gone && entry.heard.has_value() &&
         MonoSince(*entry.heard, now.mono) < options_.lease;
}

std::optional<MonoTime> Registry::AttachedSince(const Entry& entry) const {
  if (attached_.empty()) return std::nullopt;
  auto it = attached_.find(entry.info.name());
  if (it == attached_.end()) return std::nullopt;
  auto since = it->second.find(entry.info.instance_id());
  if (since == it->second.end()) return std::nullopt;
  return since->second;
}

bool Registry::Alive(const Entry& entry, Instant now) const {
  return HeardAlive(entry, now) ||
         (!entry.gone && AttachedSince(entry).has_value());
}

void Registry::VisitInPages(
    const std::function<void(const std::string&, const Entry&)>& visit) const {
  constexpr int kNodesPerLock = 256;
  std::string after;
  for (bool first = true;; first = false) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = first ? nodes_.begin() : nodes_.upper_bound(after);
    for (int visited = 0; it != nodes_.end() && visited < kNodesPerLock;
         ++it, ++visited) {
      visit(it->first, it->second);
    }
    if (it == nodes_.end()) return;
    after = std::prev(it)->first;
  }
}

HeardNodes Registry::Heard(Instant now) const {
  HeardNodes heard;
  VisitInPages([&](const std::string& name, const Entry& entry) {
    mu_.AssertReaderHeld();
    if (HeardAlive(entry, now)) heard[name] = entry.info.instance_id();
  });
  return heard;
}

void Registry::ApplyAttached(const std::vector<AttachmentChange>& changes,
                             Instant now) {
  absl::MutexLock lock(&mu_);
  for (const AttachmentChange& change : changes) {
    if (change.attached) {
      attached_[change.node].try_emplace(change.instance, now.mono);
      continue;
    }
    auto of_node = attached_.find(change.node);
    if (of_node == attached_.end() ||
        of_node->second.erase(change.instance) == 0) {
      continue;
    }
    if (of_node->second.empty()) attached_.erase(of_node);
    auto it = nodes_.find(change.node);
    if (it == nodes_.end() ||
        it->second.info.instance_id() != change.instance) {
      continue;
    }
    // Alive through the attachment until now: quiet from here.
    if (!HeardAlive(it->second, now)) it->second.quiet_since = now.mono;
  }
}

std::vector<NodeInfo> Registry::List(Instant now, bool include_gone) const {
  std::vector<NodeInfo> out;
  VisitInPages([&](const std::string& name, const Entry& entry) {
    mu_.AssertReaderHeld();
    if (!entry.gone || include_gone) out.push_back(Snapshot(entry, now));
  });
  return out;
}

absl::StatusOr<NodeInfo> Registry::Get(absl::string_view node_name,
                                       Instant now) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node ", EchoInput(node_name), " is not registered"));
  }
  return Snapshot(it->second, now);
}

absl::StatusOr<monta::v1::ListNodesReply> Registry::ListNodes(
    const monta::v1::ListNodesRequest& request, Instant now) const {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size: expected >= 0 (0: the planner's maximum, ",
        options_.max_nodes_per_page, "), got ", request.page_size()));
  }
  std::string after;
  if (!request.page_token().empty()) {
    absl::StatusOr<std::string> name = NameAfterToken(request.page_token());
    if (!name.ok()) return name.status();
    after = *std::move(name);
  }
  const int limit =
      request.page_size() == 0
          ? options_.max_nodes_per_page
          : std::min(request.page_size(), options_.max_nodes_per_page);
  monta::v1::ListNodesReply reply;
  absl::ReaderMutexLock lock(&mu_);
  auto it =
      request.page_token().empty() ? nodes_.begin() : nodes_.upper_bound(after);
  for (; it != nodes_.end(); ++it) {
    if (it->second.gone && !request.include_gone()) continue;
    if (reply.nodes_size() == limit) {
      reply.set_next_page_token(PageToken(reply.nodes().rbegin()->name()));
      break;
    }
    *reply.add_nodes() = Snapshot(it->second, now);
  }
  return reply;
}

std::vector<std::string> Registry::StaleNodes(Instant now) const {
  std::vector<std::string> out;
  VisitInPages([&](const std::string& name, const Entry& entry) {
    mu_.AssertReaderHeld();
    if (!entry.gone && !Alive(entry, now)) out.push_back(name);
  });
  return out;
}

bool Registry::GoneFor(const Entry& entry, Instant now) const {
  return !Alive(entry, now) &&
         MonoSince(entry.quiet_since, now.mono) >= options_.gone_after;
}

std::vector<std::string> Registry::RemoveGone(Instant now) {
  // Looked for under the shared lock, page by page: a node to remove is rare,
  // and the exclusive lock over every node each second would hold heartbeats.
  bool any = false;
  VisitInPages([&](const std::string&, const Entry& entry) {
    mu_.AssertReaderHeld();
    any = any || GoneFor(entry, now);
  });
  if (!any) return {};
  bool queued = false;
  std::vector<std::string> removed;
  {
    absl::MutexLock lock(&mu_);
    removed = RemoveGoneLocked(now);
    for (const std::string& name : removed) {
      Change change;
      change.kind = Change::Kind::kNodeRemoved;
      change.node_name = name;
      queued = QueueAt(std::move(change), now);
    }
  }
  if (queued) Deliver();
  return removed;
}

std::vector<std::string> Registry::RemoveGoneLocked(Instant now) {
  std::vector<std::string> removed;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (!GoneFor(it->second, now)) {
      ++it;
      continue;
    }
    removed.push_back(it->first);
    it = nodes_.erase(it);
  }
  if (removed.empty()) return removed;
  // A pair's curve lives under both nodes; the survivor's copy names a node
  // that no longer exists, so it goes too.
  const auto names_removed = [&](const BandwidthCurve& c) {
    return std::any_of(
        c.nodes().begin(), c.nodes().end(), [&](const std::string& n) {
          return std::find(removed.begin(), removed.end(), n) != removed.end();
        });
  };
  for (auto& [name, entry] : nodes_) {
    auto* curves = entry.info.mutable_curves();
    curves->erase(std::remove_if(curves->begin(), curves->end(), names_removed),
                  curves->end());
    auto& ring = entry.excluded;
    ring.erase(std::remove_if(ring.begin(), ring.end(),
                              [&](const monta::v1::ExcludedCurve& e) {
                                return names_removed(e.curve());
                              }),
               ring.end());
  }
  return removed;
}

absl::Status Registry::PutCurve(const BandwidthCurve& curve) {
  if (curve.nodes().empty()) {
    return absl::InvalidArgumentError(
        "curve.nodes: expected at least one node");
  }
  if (curve.points().empty()) {
    return absl::InvalidArgumentError(
        "curve.points: expected at least one point");
  }
  const std::string key = CurveKey(curve);
  for (const std::string& node : curve.nodes()) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      return absl::NotFoundError(
          absl::StrCat("curve.nodes: node \"", node, "\" is not registered"));
    }
  }
  // Where the curve goes on each node (nullptr: a new entry), checked for
  // every node before any changes.
  std::vector<BandwidthCurve*> slots;
  for (const std::string& node : curve.nodes()) {
    auto* curves = nodes_.find(node)->second.info.mutable_curves();
    auto same = std::find_if(
        curves->begin(), curves->end(),
        [&](const BandwidthCurve& c) { return CurveKey(c) == key; });
    if (same == curves->end() &&
        curves->size() >= options_.max_curves_per_node) {
      return absl::ResourceExhaustedError(
          absl::StrCat("curve.nodes: node \"", node, "\" has ", curves->size(),
                       " curves, at most ", options_.max_curves_per_node,
                       " (--max_curves_per_node)"));
    }
    slots.push_back(same == curves->end() ? nullptr : &*same);
  }
  for (int i = 0; i < curve.nodes_size(); ++i) {
    if (slots[i] != nullptr) {
      *slots[i] = curve;
    } else {
      *nodes_.find(curve.nodes(i))->second.info.mutable_curves()->Add() = curve;
    }
  }
  return absl::OkStatus();
}

absl::Status Registry::AddCurve(const BandwidthCurve& curve) {
  std::vector<absl::Status> errors;
  if (absl::Status s = AddCurves({curve}, "AddCurve", &errors); !s.ok()) {
    return s;
  }
  return errors.empty() ? absl::OkStatus() : errors.front();
}

absl::Status Registry::AddCurves(const std::vector<BandwidthCurve>& curves,
                                 absl::string_view what,
                                 std::vector<absl::Status>* errors) {
  if (curves.empty()) return absl::OkStatus();  // nothing to wait for
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = AdmitCount(what); !s.ok()) return s;
    for (const BandwidthCurve& curve : curves) {
      Change change;
      change.kind = Change::Kind::kCurve;
      change.curve = curve;
      change.curve.set_sequence(next_sequence_);
      if (absl::Status s = PutCurve(change.curve); !s.ok()) {
        errors->push_back(std::move(s));
        continue;
      }
      ++next_sequence_;
      queued = Queue(std::move(change)) || queued;
    }
  }
  if (queued) Deliver();
  return absl::OkStatus();
}

absl::Status Registry::RestoreCurve(const BandwidthCurve& curve) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = PutCurve(curve); !s.ok()) return s;
  next_sequence_ = std::max(next_sequence_, curve.sequence() + 1);
  return absl::OkStatus();
}

void Registry::AdvanceSequence(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  next_sequence_ = std::max(next_sequence_, sequence + 1);
}

void Registry::AddExcluded(const monta::v1::ExcludedCurve& excluded) {
  absl::MutexLock lock(&mu_);
  for (const std::string& node : excluded.curve().nodes()) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) continue;
    auto& ring = it->second.excluded;
    ring.push_back(excluded);
    while (ring.size() >
           static_cast<size_t>(std::max(0, options_.max_exclusions_per_node))) {
      ring.pop_front();
    }
  }
}

absl::StatusOr<monta::v1::ListCurvesReply> Registry::ListCurves(
    absl::string_view node_name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node ", EchoInput(node_name), " is not registered"));
  }
  monta::v1::ListCurvesReply reply;
  *reply.mutable_curves() = it->second.info.curves();
  std::sort(reply.mutable_curves()->begin(), reply.mutable_curves()->end(),
            [](const BandwidthCurve& a, const BandwidthCurve& b) {
              return a.sequence() > b.sequence();
            });
  for (auto e = it->second.excluded.rbegin(); e != it->second.excluded.rend();
       ++e) {
    *reply.add_excluded() = *e;
  }
  return reply;
}

std::vector<monta::v1::ExcludedCurve> Registry::Excluded(
    absl::string_view node_name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) return {};
  return {it->second.excluded.rbegin(), it->second.excluded.rend()};
}

bool Selects(const ForgetSelector& what, const BandwidthCurve& c) {
  if (!what.task_id.empty()) return c.task_id() == what.task_id;
  return std::find(c.nodes().begin(), c.nodes().end(), what.node_name) !=
         c.nodes().end();
}

absl::StatusOr<monta::v1::ForgetCurvesReply> Registry::Forget(
    const ForgetSelector& what) {
  if (what.task_id.empty() == what.node_name.empty()) {
    return absl::InvalidArgumentError(
        "task_id, node_name: expected exactly one of them");
  }
  if (what.task_id.size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task_id: expected at most 128 characters, got ", what.task_id.size()));
  }
  // Held until this change is delivered: the observer's answer to it (the
  // older curves) is this call's.
  absl::MutexLock deliver(&deliver_mu_);
  monta::v1::ForgetCurvesReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (!what.node_name.empty() &&
        nodes_.find(what.node_name) == nodes_.end()) {
      return absl::NotFoundError("node_name: not a registered node");
    }
    Change change;
    change.kind = Change::Kind::kCurvesForgotten;
    change.forget = what;
    change.measurements = DropSelected(what, reply);
    if (!Queue(std::move(change))) return reply;
  }
  // RegisterThen callers whose changes went with it: the delivery thread
  // tells them once deliver_mu_ is free.
  PutBack(what, DeliverLocked(), reply);
  return reply;
}

std::vector<std::string> Registry::DropSelected(
    const ForgetSelector& what, monta::v1::ForgetCurvesReply& reply) {
  std::set<std::string> measurements;
  for (auto& [name, entry] : nodes_) {
    auto* curves = entry.info.mutable_curves();
    for (const BandwidthCurve& c : *curves) {
      if (!Selects(what, c) || !measurements.insert(CurveKey(c)).second) {
        continue;
      }
      BandwidthCurve& dropped = *reply.add_forgotten();
      dropped = c;
      dropped.clear_points();
    }
    curves->erase(std::remove_if(curves->begin(), curves->end(),
                                 [&](const BandwidthCurve& c) {
                                   return Selects(what, c);
                                 }),
                  curves->end());
    auto& ring = entry.excluded;
    ring.erase(std::remove_if(ring.begin(), ring.end(),
                              [&](const monta::v1::ExcludedCurve& e) {
                                return Selects(what, e.curve());
                              }),
               ring.end());
  }
  return {measurements.begin(), measurements.end()};
}

void Registry::PutBack(const ForgetSelector& what,
                       const std::vector<BandwidthCurve>& older,
                       monta::v1::ForgetCurvesReply& reply) {
  absl::MutexLock lock(&mu_);
  for (const BandwidthCurve& curve : older) {
    if (Selects(what, curve) || Superseded(curve) || !PutCurve(curve).ok()) {
      continue;
    }
    BandwidthCurve& restored = *reply.add_restored();
    restored = curve;
    restored.clear_points();
  }
}

bool Registry::Superseded(const BandwidthCurve& older) const {
  const std::string key = CurveKey(older);
  for (const std::string& node : older.nodes()) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) continue;
    for (const BandwidthCurve& c : it->second.info.curves()) {
      if (CurveKey(c) == key && c.sequence() >= older.sequence()) return true;
    }
  }
  return false;
}

void Registry::Restore(const NodeInfo& node, Instant now) {
  absl::MutexLock lock(&mu_);
  Entry& entry = nodes_[node.name()];
  // Heard before (by this process, as this instance): the lease stays.
  std::optional<HeardBefore> heard;
  if (entry.heard.has_value() &&
      entry.info.instance_id() == node.instance_id()) {
    heard = HeardBefore{node.instance_id(), *entry.heard, entry.last_heartbeat};
  } else if (auto before = heard_before_clear_.find(node.name());
             before != heard_before_clear_.end()) {
    if (before->second.instance_id == node.instance_id())
      heard = before->second;
    heard_before_clear_.erase(before);
  }
  // Curves come on their own (RestoreCurve): the ones it holds stay.
  google::protobuf::RepeatedPtrField<BandwidthCurve> curves =
      std::move(*entry.info.mutable_curves());
  entry.info = node;
  *entry.info.mutable_curves() = std::move(curves);
  TrimEvents(entry.info, options_.max_events_per_node);
  entry.heard.reset();
  entry.quiet_since = now.mono;
  entry.registered_at = absl::FromUnixNanos(
      TimeUtil::TimestampToNanoseconds(node.registered_at()));
  entry.last_heartbeat = absl::FromUnixNanos(
      TimeUtil::TimestampToNanoseconds(node.last_heartbeat()));
  entry.gone = node.state() == monta::v1::NODE_STATE_GONE;
  if (heard.has_value()) KeepHeard(*heard, entry);
}

void Registry::KeepHeard(const HeardBefore& heard, Entry& entry) {
  if (entry.gone) return;
  entry.heard = heard.heard;
  entry.quiet_since = heard.heard;
  entry.last_heartbeat = std::max(entry.last_heartbeat, heard.last_heartbeat);
}

void Registry::Clear() {
  Registry empty(options_);
  Replace(empty);
}

void Registry::Replace(Registry& loaded) {
  std::map<std::string, Entry, std::less<>> nodes;
  uint64_t next_sequence = 0;
  {
    absl::MutexLock lock(&loaded.mu_);
    nodes.swap(loaded.nodes_);
    next_sequence = loaded.next_sequence_;
  }
  std::deque<std::pair<uint64_t, std::function<void(absl::Status)>>> dropped;
  {
    absl::MutexLock deliver(&deliver_mu_);
    absl::MutexLock lock(&mu_);
    heard_before_clear_.clear();
    for (const auto& [name, entry] : nodes_) {
      if (!entry.heard.has_value()) continue;
      heard_before_clear_[name] = HeardBefore{
          entry.info.instance_id(), *entry.heard, entry.last_heartbeat};
    }
    // As Restore after Clear: a node heard as the same instance keeps its
    // lease.
    for (auto& [name, entry] : nodes) {
      auto before = heard_before_clear_.find(name);
      if (before == heard_before_clear_.end()) continue;
      if (before->second.instance_id == entry.info.instance_id()) {
        KeepHeard(before->second, entry);
      }
      heard_before_clear_.erase(before);
    }
    nodes_.swap(nodes);
    next_sequence_ = std::max(next_sequence_, next_sequence);
    delivered_total_ += pending_.size();
    pending_.clear();
    pending_node_.clear();
    queued_at_.clear();
    // No batch is in flight (deliver_mu_ is held): every registration still
    // waiting had its change in pending_, now dropped unstored.
    dropped.swap(waiters_);
  }
  for (auto& waiter : dropped) {
    waiter.second(absl::UnavailableError(
        "Register: not stored: this replica stopped leading before its store "
        "held the registration; register again"));
  }
}

NodeInfo Registry::Snapshot(const Entry& entry, Instant now) const {
  NodeInfo info = entry.info;
  // Monotonic while this process heard the node; for a restored node only the
  // stored wall time is known, shown (never compared) as its age. A node
  // alive through an attachment (its heartbeats go to another replica): since
  // this process last heard it or saw that attachment appear, the later.
  absl::Duration age =
      entry.heard.has_value()
          ? MonoSince(*entry.heard, now.mono)
          : std::max(absl::ZeroDuration(), now.wall - entry.last_heartbeat);
  if (std::optional<MonoTime> attached = AttachedSince(entry);
      attached.has_value() && !entry.gone) {
    age = std::min(age, MonoSince(*attached, now.mono));
  }
  if (entry.gone) {
    info.set_state(monta::v1::NODE_STATE_GONE);
  } else if (Alive(entry, now)) {
    info.set_state(monta::v1::NODE_STATE_ALIVE);
  } else {
    info.set_state(monta::v1::NODE_STATE_STALE);
  }
  *info.mutable_registered_at() = ToProto(entry.registered_at);
  *info.mutable_last_heartbeat() = ToProto(entry.last_heartbeat);
  info.set_lease_age_seconds(absl::ToDoubleSeconds(age));
  info.set_lease_seconds(absl::ToDoubleSeconds(options_.lease));
  return info;
}

void Registry::RecordTopology(Entry& entry,
                              const monta::v1::NodeTopology& topology,
                              Instant now) {
  if (differ_ != nullptr) {
    for (monta::v1::TopologyEvent& event :
         differ_(entry.info.topology(), topology)) {
      *event.mutable_time() = ToProto(now.wall);
      *entry.info.add_events() = std::move(event);
    }
    TrimEvents(entry.info, options_.max_events_per_node);
  }
  StoreTopology(topology, entry.info);
}

bool Registry::Notify(const Entry& entry, Instant now) {
  if (!observed_) return false;
  Change change;
  change.kind = Change::Kind::kNode;
  change.node = Snapshot(entry, now);
  return QueueAt(std::move(change), now);
}

}  // namespace monta::registry
