#include "server/planner_server.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/bandwidth/collective_proto.h"
#include "common/proto_names.h"
#include "common/rpc_metrics.h"
#include "common/topology_diff.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/listen_probe.h"

namespace monta {

namespace {

// The election's keys sit under the store's prefix, without its last '/'.
std::string ElectionPrefix(const std::string& etcd_prefix) {
  return std::string(absl::StripSuffix(etcd_prefix, "/"));
}

// This machine's hostname; empty when the system has none.
std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

// host:port of --listen with the bound port; a wildcard host becomes the
// hostname.
std::string AdvertisedAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    host = HostName();
  }
  return absl::StrCat(host, ":", port);
}

// How long a new leader waits for its follower to apply the newest commit
// before it reloads the registry instead: about what a reload of 20,000
// nodes takes. The follower applies a commit milliseconds after etcd made
// it, so the wait ends at once unless the cache is listing or its watch is
// stuck (a member stopped, a compaction).
constexpr absl::Duration kCatchUpTimeout = absl::Seconds(1);

}  // namespace

// The registry's observer with --store=etcd: commits under the fence of the
// term that runs now; while this replica follows it drops the changes (a
// follower queues none; a new leader keeps its cache only when nothing is
// pending, else it reloads from etcd, which drops them).
class PlannerServer::TermWriter : public registry::RegistryObserver {
 public:
  void Set(std::unique_ptr<store::RegistryWriter> writer) {
    absl::MutexLock lock(&mu_);
    writer_ = std::move(writer);
  }
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<registry::Change>& changes) override {
    absl::MutexLock lock(&mu_);
    if (writer_ == nullptr) return {};
    return writer_->Changed(changes);
  }

 private:
  absl::Mutex mu_;
  std::unique_ptr<store::RegistryWriter> writer_ ABSL_GUARDED_BY(mu_);
};

PlannerServer::PlannerServer(PlannerOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(
    PlannerOptions options) {
  std::unique_ptr<PlannerServer> s(new PlannerServer(std::move(options)));
  if (absl::Status started = s->StartMetrics(); !started.ok()) return started;
  if (absl::Status opened = s->OpenRegistry(); !opened.ok()) return opened;
  if (absl::Status opened = s->OpenFabric(); !opened.ok()) return opened;
  s->StartCoordinator();
  if (absl::Status loaded = s->LoadDenyList(); !loaded.ok()) return loaded;
  if (absl::Status started = s->StartGrpc(); !started.ok()) return started;
  if (absl::Status started = s->StartWebhook(); !started.ok()) return started;
  s->WatchStore();
  if (absl::Status started = s->StartLiveness(); !started.ok()) return started;
  if (absl::Status started = s->StartElection(); !started.ok()) return started;
  PlannerServer* self = s.get();
  s->maintenance_ = std::thread([self] { self->Maintain(); });
  if (s->follower_ != nullptr) {
    s->follow_thread_ = std::thread([self] { self->FollowStore(); });
  }
  if (s->attachments_ != nullptr) {
    s->liveness_thread_ = std::thread([self] { self->FollowLiveness(); });
  }
  return s;
}

absl::Status PlannerServer::StartMetrics() {
  metrics_ = std::make_shared<prometheus::Registry>();
  if (!options_.metrics_address.empty()) {
    http::HttpServerOptions http_options;
    http_options.address = options_.metrics_address;
    http_options.name = "metrics address";
    http_options.limits = options_.http_limits;
    absl::StatusOr<std::unique_ptr<http::MetricsEndpoint>> endpoint =
        http::MetricsEndpoint::Start(std::move(http_options));
    if (!endpoint.ok()) return endpoint.status();
    metrics_endpoint_ = *std::move(endpoint);
    metrics_endpoint_->RegisterCollectable(metrics_);
    metrics_port_ = metrics_endpoint_->port();
  }
  planner_metrics_ = std::make_unique<metrics::PlannerMetrics>(*metrics_);
  return absl::OkStatus();
}

absl::Status PlannerServer::OpenRegistry() {
  registry_ = std::make_unique<registry::Registry>(
      options_.registry, &topology_diff::DiffTopologyEvents);
  knowledge_ = std::make_unique<planning::PlanKnowledge>();
  if (options_.store == "etcd" && !options_.db_path.empty()) {
    // Every replica's state, records and knowledge live in etcd: a file
    // beside it would hold nothing, and an operator would look there.
    return absl::InvalidArgumentError(absl::StrCat(
        "--db ", options_.db_path,
        ": not used with --store=etcd (nodes, curves, calibration, "
        "decisions, verifications and the audit log are all kept in etcd); "
        "drop it, or copy a single replica's file into etcd with "
        "--migrate_from_sqlite"));
  }
  if (!options_.db_path.empty()) {
    if (absl::Status opened = OpenStore(); !opened.ok()) return opened;
  }
  if (options_.store == "etcd") {
    if (absl::Status opened = OpenEtcdStore(); !opened.ok()) return opened;
    term_writer_ = std::make_unique<TermWriter>();
    registry_->SetObserver(term_writer_.get());
  } else if (!options_.db_path.empty()) {
    // The one writer of the file from now on (a planner opened on it before
    // is fenced off).
    absl::StatusOr<store::Fence> fence = store_->Lead();
    if (!fence.ok()) {
      return absl::Status(fence.status().code(),
                          absl::StrCat("--db ", options_.db_path, ": ",
                                       fence.status().message()));
    }
    sqlite_fence_ = *fence;
    registry_writer_ =
        std::make_unique<store::RegistryWriter>(store_.get(), *fence);
    registry_->SetObserver(registry_writer_.get());
    // What earlier verify runs taught this planner, kept from here on.
    if (!LoadKnowledge(*store_)) {
      return absl::UnavailableError(absl::StrCat(
          "--db ", options_.db_path, ": cannot list its plan knowledge"));
    }
    knowledge_->SetWriter(KnowledgeWriter(store_.get(), *fence));
  }
  cluster_collector_ =
      std::make_shared<metrics::ClusterCollector>(registry_.get());
  if (metrics_endpoint_ != nullptr)
    metrics_endpoint_->RegisterCollectable(cluster_collector_);
  return absl::OkStatus();
}

absl::Status PlannerServer::OpenStore() {
  const absl::Status opened = OpenAndLoadStore();
  if (opened.code() != absl::StatusCode::kDataLoss) return opened;
  if (!options_.db_reset_corrupt) {
    return absl::DataLossError(absl::StrCat(
        opened.message(),
        " (--db_reset_corrupt moves it aside and starts an empty database)"));
  }
  store_.reset();
  absl::StatusOr<std::string> aside =
      store::SqliteStore::MoveAside(options_.db_path);
  if (!aside.ok()) return aside.status();
  std::cerr << "monta-planner: " << opened.message() << "; moved it aside to "
            << *aside << " (--db_reset_corrupt), starting an empty database"
            << std::endl;
  return OpenAndLoadStore();
}

absl::Status PlannerServer::OpenEtcdStore() {
  const auto failed = [](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("--store=etcd: ", status.message()));
  };
  replica_id_ = options_.replica_id;
  if (replica_id_.empty()) {
    const std::string host = HostName();
    replica_id_ = absl::StrCat(host.empty() ? "planner" : host, "-", getpid());
  }
  if (absl::Status s = election::ValidateReplicaId(replica_id_, "--replica_id");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Create(options_.etcd);
  if (!client.ok()) return failed(client.status());
  etcd_client_ = *std::move(client);
  etcd_store::EtcdStoreOptions store_options;
  store_options.prefix = options_.etcd_prefix;
  // The election's fence: the leader's candidate key's create revision.
  store_options.fence_key =
      election::CandidateKey(ElectionPrefix(options_.etcd_prefix), replica_id_);
  store_options.leader_epoch = [this]() -> absl::StatusOr<int64_t> {
    std::optional<int64_t> epoch =
        election_ != nullptr ? election_->epoch() : std::nullopt;
    if (!epoch.has_value()) {
      return election::NotLeaderError(0, "this replica does not lead");
    }
    return *epoch;
  };
  absl::StatusOr<std::unique_ptr<etcd_store::EtcdStore>> store =
      etcd_store::EtcdStore::Open(etcd_client_.get(), store_options);
  if (!store.ok()) return failed(store.status());
  etcd_store_ = *std::move(store);
  store::FollowerOptions follower_options;
  follower_options.on_discarded = DiscardedRecorder();
  follower_ = std::make_unique<store::Follower>(
      etcd_store_.get(), registry_.get(), std::move(follower_options));
  planning::PlanKnowledge* knowledge = knowledge_.get();
  metrics::PlannerMetrics* metrics = planner_metrics_.get();
  store::KnowledgeFollower::Sink sink;
  sink.replace = [knowledge, metrics](const auto& records) {
    const planning::PlanKnowledge::Loaded loaded = knowledge->Replace(records);
    for (int i = 0; i < loaded.malformed; ++i) {
      metrics->RecordDiscardedError("knowledge_record");
    }
  };
  sink.apply = [knowledge, metrics](const store::KnowledgeChange& change) {
    if (!knowledge->Apply(change)) {
      metrics->RecordDiscardedError("knowledge_record");
    }
  };
  knowledge_follower_ = std::make_unique<store::KnowledgeFollower>(
      etcd_store_.get(), std::move(sink));
  etcd_store::RecordWriterOptions records;
  records.prefix = options_.etcd_prefix;
  records.origin = replica_id_;
  metrics::PlannerMetrics* planner_metrics = planner_metrics_.get();
  records.commit_timeout = options_.record_commit_timeout;
  records.on_refused = [planner_metrics](const std::string& reason) {
    planner_metrics->RecordRecordRefused(reason);
  };
  records.on_write_error = [planner_metrics](const absl::Status&) {
    planner_metrics->RecordStoreError("records");
  };
  records.on_committed =
      [planner_metrics](const std::vector<double>& commit_seconds) {
        planner_metrics->RecordRecordsCommitted(commit_seconds);
      };
  record_writer_ = std::make_unique<etcd_store::RecordWriter>(
      etcd_client_.get(), std::move(records));
  std::cerr << "monta-planner: --store=etcd: " << options_.etcd_prefix << " on "
            << absl::StrJoin(options_.etcd.endpoints, ",") << ", replica "
            << replica_id_ << std::endl;
  return absl::OkStatus();
}

absl::Status PlannerServer::StartElection() {
  if (etcd_store_ == nullptr) return absl::OkStatus();
  advertise_address_ = options_.advertise_address;
  if (advertise_address_.empty()) {
    advertise_address_ = AdvertisedAddress(options_.grpc_address, grpc_port_);
  }
  server_->GetHealthCheckService()->SetServingStatus(
      monta::v1::Planner::service_full_name(), false);
  server_->GetHealthCheckService()->SetServingStatus(kReadService, false);
  election::ElectionOptions election_options;
  election_options.prefix = ElectionPrefix(options_.etcd_prefix);
  election_options.replica_id = replica_id_;
  election_options.value = advertise_address_;
  election_options.lease_ttl = options_.leader_lease;
  election_options.on_leading = [this](int64_t epoch) { StartLeading(epoch); };
  election_options.on_stopped_leading = [this](int64_t epoch,
                                               const absl::Status& why) {
    StopLeading(epoch, std::string(why.message()));
  };
  absl::StatusOr<std::unique_ptr<election::Election>> started =
      election::Election::Start(etcd_client_.get(), election_options);
  if (!started.ok()) {
    return absl::Status(
        started.status().code(),
        absl::StrCat("--store=etcd: election: ", started.status().message()));
  }
  election_ = *std::move(started);
  std::cerr << "monta-planner: replica " << replica_id_ << " campaigns as "
            << advertise_address_ << " (lease "
            << absl::FormatDuration(options_.leader_lease) << ")" << std::endl;
  return absl::OkStatus();
}

// On the election's campaign thread (on_leading), on purpose: the
// election's notices are serialized (on_leading(E) before
// on_stopped_leading(E), never concurrent), which the epoch check below and
// StopLeading rely on. The take-over does not stall the lease: its keepalive
// runs on a thread of its own (etcd::LeaseKeepAlive). While it runs, the
// campaign thread neither watches the leader key nor checks the lease's
// local expiry, and a loss notice waits for it; the fence covers that gap
// (epoch() checks the expiry itself and every write compares the key), and
// StopLeading runs as soon as it returns.
//
// What it costs is a part of the failover budget (TTL + 3 s, most of which
// is etcd's: server/election/README.md, "Failover time"): the registry is the
// follower's cache when it holds every commit (TakeOverRegistry: one read of
// the newest commit's revision and, usually, no wait; 5-60 ms in all at
// 5,000 nodes), else a reload (20,000 nodes of 8 GPUs and 8 NICs: 1.0-1.2 s
// at load average 2.5-3.8, 3.8-5.8 s at 8-10; server/etcd_store/README.md);
// then the plan knowledge and the task queue are listed (a few keys each). The
// store writer's mirror (a list of the registry's keys) loads after the replica
// serves, on the follower's thread (EtcdStore::WarmUp): the first registry
// commit of the term waits for it, coordination does not.
void PlannerServer::StartLeading(int64_t epoch) {
  absl::MutexLock lock(&term_mu_);
  // The mirror is listed on the follower's thread (FollowStore), not here:
  // the election's notices wait for this callback, and a resign or a loss
  // right after the election would wait for that list too.
  if (StartTerm(epoch)) warm_up_writer_ = true;
}

bool PlannerServer::StartTerm(int64_t epoch) {
  if (term_epoch_ == epoch || election_ == nullptr ||
      election_->epoch() != epoch) {
    return false;
  }
  const absl::Time elected_at = absl::Now();
  const MonoTime started = std::chrono::steady_clock::now();
  std::string registry_from;
  absl::Status loaded = TakeOverRegistry(&registry_from);
  const MonoTime registry_ready = std::chrono::steady_clock::now();
  knowledge_follower_->Pause();
  if (loaded.ok() && !LoadKnowledge(*etcd_store_)) {
    loaded = absl::UnavailableError("cannot list the plan knowledge");
  }
  absl::StatusOr<store::Fence> fence =
      loaded.ok() ? etcd_store_->Lead() : absl::StatusOr<store::Fence>(loaded);
  if (!fence.ok()) {
    // Maintain retries while the election says this replica leads.
    std::cerr << "monta-planner: elected with epoch " << epoch
              << " but cannot lead yet: " << fence.status() << std::endl;
    planner_metrics_->RecordDiscardedError("start_leading");
    return false;
  }
  coordinator_->SetLeader(advertise_address_);
  // The task queue as etcd holds it: the unfinished tasks of earlier
  // leaders are handed out again under this epoch.
  if (!LeadWithTasks(epoch, *etcd_store_, *fence)) {
    planner_metrics_->RecordDiscardedError("start_leading");
    return false;
  }
  term_writer_->Set(
      std::make_unique<store::RegistryWriter>(etcd_store_.get(), *fence));
  knowledge_->SetWriter(KnowledgeWriter(etcd_store_.get(), *fence));
  term_epoch_ = epoch;
  server_->GetHealthCheckService()->SetServingStatus(
      monta::v1::Planner::service_full_name(), true);
  const MonoTime ready = std::chrono::steady_clock::now();
  // One write: std::cerr is unbuffered, and other threads log meanwhile.
  std::cerr << absl::StrCat(
                   "monta-planner: leading with epoch ", epoch, " (elected at ",
                   absl::FormatTime("%H:%M:%E3S", elected_at,
                                    absl::UTCTimeZone()),
                   " UTC; ", registry_->List(Instant::Now(), false).size(),
                   " nodes ", registry_from, " in ",
                   absl::FormatDuration(MonoSince(started, registry_ready)),
                   "; serving ",
                   absl::FormatDuration(MonoSince(started, ready)),
                   " after the election)\n")
            << std::flush;
  return true;
}

absl::Status PlannerServer::TakeOverRegistry(std::string* from) {
  // Every commit of an earlier leader landed before its key went, so before
  // this replica was elected: the newest commit read now is the last one
  // this registry may lack, and nobody else commits from here on.
  absl::StatusOr<int64_t> newest = etcd_store_->NewestRevision();
  const bool kept = newest.ok() &&
                    follower_->PauseWhenApplied(*newest, kCatchUpTimeout) &&
                    registry_->PendingChanges() == 0;
  if (!newest.ok()) follower_->Pause();
  if (kept) {
    *from = absl::StrCat("kept from the follower's cache (at revision ",
                         follower_->revision(), " >= the newest commit ",
                         *newest, ")");
    return absl::OkStatus();
  }
  // Not known to be in sync (a List in progress or failing, the watch
  // behind, the store unreadable, a change of this replica's own waiting):
  // the registry as etcd holds it now, loaded beside it and swapped in at
  // once, so a read let in before the pause never finds it emptied.
  registry::Registry loaded(registry_->options());
  absl::Status listed =
      store::LoadInto(*etcd_store_, loaded, DiscardedRecorder());
  if (listed.ok()) registry_->Replace(loaded);
  *from = "reloaded from etcd (the follower's cache was not known in sync)";
  return listed;
}

void PlannerServer::StopLeading(int64_t epoch, const std::string& why) {
  absl::MutexLock lock(&term_mu_);
  // At once: no task handed out or accepted from here on, the running ones
  // fail "leader changed", the open task streams end UNAVAILABLE.
  coordinator_->Follow(why, Instant::Now());
  if (term_writer_ != nullptr) term_writer_->Set(nullptr);
  knowledge_->SetWriter(nullptr);
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(
        monta::v1::Planner::service_full_name(), false);
  }
  if (gateway_ != nullptr) gateway_->EndDeniedWatches();
  // The cache lists again and follows the new leader's commits.
  if (follower_ != nullptr) follower_->Resume();
  if (knowledge_follower_ != nullptr) knowledge_follower_->Resume();
  if (term_epoch_ == 0) return;
  term_epoch_ = 0;
  std::cerr << "monta-planner: stopped leading epoch " << epoch << ": " << why
            << std::endl;
}

void PlannerServer::FollowElection() {
  if (election_ == nullptr) return;
  if (std::optional<int64_t> epoch = election_->epoch(); epoch.has_value()) {
    StartLeading(*epoch);  // a no-op once the term runs
    return;
  }
  absl::StatusOr<std::optional<election::Candidate>> leader =
      election::ReadLeader(*etcd_client_, ElectionPrefix(options_.etcd_prefix));
  if (leader.ok()) {
    coordinator_->SetLeader(leader->has_value() ? (*leader)->value : "");
  }
}

void PlannerServer::FollowStore() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  std::optional<bool> readable;
  absl::Duration wait = absl::ZeroDuration();
  std::string knowledge_failure;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    wait = follower_->Step();
    // A new leader's store writer lists its mirror (within a poll of the
    // term's start; a commit before that lists it itself).
    if (warm_up_writer_.exchange(false)) WarmUpWriter();
    // The knowledge's watch on the same thread: its changes are rare, and
    // the registry's step above already waited for the poll.
    const absl::Status followed =
        knowledge_follower_->Step(absl::ZeroDuration());
    if (!followed.ok() && followed.message() != knowledge_failure) {
      std::cerr << "monta-planner: following the plan knowledge: " << followed
                << " (listing again)" << std::endl;
    }
    knowledge_failure = std::string(followed.message());
    const store::Follower::Lag lag = follower_->lag();
    planner_metrics_->SetFollowerLag(absl::ToDoubleSeconds(lag.seconds),
                                     lag.revisions);
    const bool now_readable = Readable().ok();
    if (readable != now_readable) {
      health->SetServingStatus(kReadService, now_readable);
      readable = now_readable;
    }
  }
}

void PlannerServer::WarmUpWriter() {
  const MonoTime started = std::chrono::steady_clock::now();
  const absl::Status warm = etcd_store_->WarmUp();
  const absl::Duration took =
      MonoSince(started, std::chrono::steady_clock::now());
  if (!warm.ok()) {
    std::cerr << "monta-planner: the store writer's mirror: " << warm
              << " (the next commit lists again)" << std::endl;
    return;
  }
  std::cerr << "monta-planner: the store writer's mirror listed in "
            << absl::FormatDuration(took) << std::endl;
}

absl::Status PlannerServer::StartLiveness() {
  if (etcd_store_ == nullptr) return absl::OkStatus();
  etcd_store::AttachmentsOptions options;
  options.prefix = options_.etcd_prefix;
  options.replica_id = replica_id_;
  options.lease_ttl = options_.leader_lease;
  registry::Registry* registry = registry_.get();
  options.on_attached =
      [registry](const std::vector<registry::AttachmentChange>& changes) {
        registry->ApplyAttached(changes, Instant::Now());
      };
  absl::StatusOr<std::unique_ptr<etcd_store::Attachments>> started =
      etcd_store::Attachments::Start(etcd_client_.get(), std::move(options));
  if (!started.ok()) {
    return absl::Status(
        started.status().code(),
        absl::StrCat("--store=etcd: ", started.status().message()));
  }
  attachments_ = *std::move(started);
  return absl::OkStatus();
}

void PlannerServer::FollowLiveness() {
  MonoTime last_publish = MonoTime::min();
  absl::Status last_error;
  while (!stop_.HasBeenNotified()) {
    // Watch errors (etcd unreachable) end the wait early: pause a moment.
    absl::Status followed = attachments_->Follow(absl::Milliseconds(200));
    const MonoTime now = std::chrono::steady_clock::now();
    absl::Status published;
    if (last_publish == MonoTime::min() ||
        MonoSince(last_publish, now) >= options_.liveness_publish) {
      last_publish = now;
      // The leader hears agents registering and refreshing their topology:
      // those heartbeating to another replica are that replica's to attach.
      const int64_t puts = attachments_->puts();
      const int64_t deletes = attachments_->deletes();
      const int64_t txns = attachments_->writes();
      published = attachments_->Publish(registry_->Heard(Instant::Now()),
                                        coordinator_->CheckLeading().ok());
      planner_metrics_->RecordAttachmentWrites(
          attachments_->puts() - puts, attachments_->deletes() - deletes,
          attachments_->writes() - txns);
    }
    const absl::Status& failed = !followed.ok() ? followed : published;
    if (!failed.ok()) {
      planner_metrics_->RecordStoreError("attachments");
      if (failed.message() != last_error.message()) {
        std::cerr << "monta-planner: liveness: " << failed.message()
                  << std::endl;
      }
      last_error = failed;
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    } else {
      last_error = absl::OkStatus();
    }
  }
}

absl::Status PlannerServer::Readable() const {
  absl::Status leading = coordinator_->CheckLeading();
  // A follower answers with the leader's calibration and verified evidence
  // or not at all.
  if (leading.ok() || follower_ == nullptr || !follower_->in_sync() ||
      !knowledge_follower_->in_sync()) {
    return leading;
  }
  const absl::Duration lag = follower_->lag().seconds;
  if (lag <= options_.follower_max_lag) return absl::OkStatus();
  // Still naming the leader: a client goes there.
  return absl::UnavailableError(absl::StrCat(
      leading.message(), "; this replica's cache is ",
      absl::FormatDuration(absl::Trunc(lag, absl::Milliseconds(100))),
      " behind the store (--follower_max_lag_seconds ",
      absl::ToDoubleSeconds(options_.follower_max_lag), ")"));
}

std::optional<int64_t> PlannerServer::leader_epoch() const {
  if (election_ == nullptr) return std::nullopt;
  return election_->epoch();
}

std::function<void(const std::string&)> PlannerServer::DiscardedRecorder() {
  metrics::PlannerMetrics* planner_metrics = planner_metrics_.get();
  return [planner_metrics](const std::string& site) {
    planner_metrics->RecordDiscardedError(site);
  };
}

bool PlannerServer::LoadKnowledge(store::KnowledgeStore& store) {
  absl::StatusOr<store::KnowledgeList> listed = store.ListKnowledge();
  if (!listed.ok()) {
    std::cerr << "monta-planner: cannot list the plan knowledge: "
              << listed.status() << std::endl;
    return false;
  }
  const planning::PlanKnowledge::Loaded loaded =
      knowledge_->Replace(listed->records);
  for (int i = 0; i < loaded.malformed; ++i) {
    planner_metrics_->RecordDiscardedError("knowledge_record");
  }
  std::cerr << "monta-planner: plan knowledge on the store: "
            << loaded.node_sets << " node sets (calibration and runs), "
            << loaded.jobs << " verified jobs, " << loaded.malformed
            << " malformed (skipped)" << std::endl;
  return true;
}

planning::PlanKnowledge::Writer PlannerServer::KnowledgeWriter(
    store::KnowledgeStore* store, store::Fence fence) {
  // A failed write is logged and told to the write listener by the store
  // (health, monta_store_errors_total{operation="knowledge"}); the next
  // change of that record writes it whole.
  return [store, fence](const store::KnowledgeWrites& writes) {
    (void)store->WriteKnowledge(fence, writes);
  };
}

absl::Status PlannerServer::OpenAndLoadStore() {
  absl::StatusOr<std::unique_ptr<store::SqliteStore>> store =
      store::SqliteStore::Open(options_.db_path);
  if (!store.ok()) return store.status();
  // LoadInto restores nothing when it fails, so a retry starts clean.
  if (absl::Status loaded =
          store::LoadInto(**store, *registry_, DiscardedRecorder());
      !loaded.ok()) {
    return absl::DataLossError(
        absl::StrCat("--db ", options_.db_path, ": ", loaded.message()));
  }
  store_ = *std::move(store);
  return absl::OkStatus();
}

void PlannerServer::StartCoordinator() {
  coordination::CoordinatorOptions coordinator_options = options_.coordinator;
  const fabric::Fabric* fabric = fabric_.get();
  coordinator_options.fabric_span =
      [fabric](const std::vector<std::string>& nodes) {
        return fabric->SpanOf(nodes);
      };
  coordinator_ = std::make_unique<coordination::Coordinator>(
      registry_.get(), coordinator_options);
  // With an election nobody leads here until it says so; meanwhile (and
  // while following) GetBenchmarkTask reads the task queue from etcd.
  if (etcd_store_ != nullptr) {
    coordinator_->Follow("campaigning", Instant::Now());
    etcd_store::EtcdStore* tasks = etcd_store_.get();
    coordinator_->SetTaskRecordReader([tasks](const std::string& task_id) {
      return tasks->GetTask(task_id);
    });
  } else if (store_ != nullptr) {
    // One replica: the tasks a previous process left (finished ones answer
    // as before, unfinished ones fail "planner restarted").
    (void)LeadWithTasks(0, *store_, sqlite_fence_);
  }
  held_bytes_ = std::make_shared<metrics::HeldBytesCollector>();
  coordination::Coordinator* coordinator = coordinator_.get();
  held_bytes_->Add("rendezvous", [coordinator] {
    return static_cast<double>(coordinator->rendezvous_bytes());
  });
  held_bytes_->Add("task_reports", [coordinator] {
    return static_cast<double>(coordinator->held_report_bytes());
  });
  if (metrics_endpoint_ != nullptr)
    metrics_endpoint_->RegisterCollectable(held_bytes_);
  metrics::PlannerMetrics* planner_metrics = planner_metrics_.get();
  coordinator_->SetTaskFinishedCallback(
      [planner_metrics](const monta::v1::BenchmarkTaskStatus& status) {
        planner_metrics->RecordBenchmarkTask(status);
        for (const monta::v1::ExcludedCurve& excluded : status.excluded()) {
          const monta::v1::BandwidthCurve& c = excluded.curve();
          std::cerr << "monta-planner: task " << status.task_id()
                    << ": excluded the "
                    << bandwidth::CollectiveProtoName(c.collective())
                    << " curve on " << absl::StrJoin(c.nodes(), ",") << " ("
                    << ShortName(excluded.reason())
                    << "): " << excluded.detail() << std::endl;
        }
      });
}

bool PlannerServer::LeadWithTasks(int64_t epoch, store::TaskStore& tasks,
                                  store::Fence fence) {
  absl::StatusOr<std::vector<std::string>> records = tasks.ListTasks();
  if (!records.ok()) {
    std::cerr << "monta-planner: cannot list the benchmark tasks: "
              << records.status() << std::endl;
    return false;
  }
  store::TaskStore* store = &tasks;
  const coordination::RestoredTasks restored = coordinator_->Lead(
      epoch,
      [store, fence](const store::TaskWrites& writes) {
        return store->WriteTasks(fence, writes);
      },
      *records, Instant::Now());
  std::cerr << "monta-planner: benchmark tasks on the store: "
            << restored.finished << " finished, " << restored.reissued
            << " handed out again, " << restored.failed
            << " failed (not handed out again), " << restored.malformed
            << " malformed" << std::endl;
  return true;
}

absl::Status PlannerServer::LoadDenyList() {
  if (options_.deny_list_file.empty()) return absl::OkStatus();
  if (options_.grpc_security.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--deny_list_file ", options_.deny_list_file,
        ": needs mutual TLS (under --insecure callers have no identity to "
        "deny)"));
  }
  absl::StatusOr<std::unique_ptr<api::DenyList>> loaded =
      api::DenyList::Load(options_.deny_list_file);
  planner_metrics_->RecordDenyListLoad(loaded.ok(),
                                       loaded.ok() ? (*loaded)->size() : 0);
  if (!loaded.ok()) return loaded.status();
  deny_list_ = *std::move(loaded);
  std::cerr << "monta-planner: --deny_list_file " << deny_list_->path() << ": "
            << deny_list_->size() << " identities denied" << std::endl;
  return absl::OkStatus();
}

void PlannerServer::RefreshDenyList() {
  if (deny_list_ == nullptr) return;
  absl::StatusOr<bool> changed = deny_list_->Reload();
  planner_metrics_->RecordDenyListLoad(changed.ok(), deny_list_->size());
  if (!changed.ok()) {
    std::cerr << "monta-planner: " << changed.status().message()
              << "; keeping the previous deny list (" << deny_list_->size()
              << " identities)" << std::endl;
    return;
  }
  if (!*changed) return;
  std::cerr << "monta-planner: --deny_list_file " << deny_list_->path()
            << " changed: " << deny_list_->size() << " identities denied"
            << std::endl;
  gateway_->EndDeniedWatches();
}

planning::FabricTreeSource PlannerServer::FabricTree() const {
  // Without a fabric map or node labels nobody is placed: no source.
  if (!fabric_->has_sources()) return nullptr;
  // As GetStrategy reads it (server/api/planner_service.cc): the registered
  // nodes placed in the tree, each level with its measurement.
  return [this]() -> std::optional<monta::v1::FabricReply> {
    return fabric_->Tree(registry_->List(Instant::Now(), false));
  };
}

absl::Status PlannerServer::OpenFabric() {
  absl::StatusOr<std::unique_ptr<fabric::Fabric>> opened =
      fabric::Fabric::Open(options_.fabric, absl::Now());
  if (!opened.ok()) return opened.status();
  fabric_ = *std::move(opened);
  for (const auto& source : fabric_->Sources()) {
    const bool ok = source.error().empty();
    std::cerr << "monta-planner: "
              << (source.source() == monta::v1::FABRIC_SOURCE_MAP
                      ? "--fabric_map_file "
                      : "--fabric_node_labels_file ")
              << source.path() << ": "
              << (ok ? absl::StrCat(source.nodes(), " nodes in ",
                                    source.racks(), " racks")
                     : absl::StrCat("not read yet (", source.error(), ")"))
              << std::endl;
  }
  fabric_collector_ = std::make_shared<metrics::FabricCollector>(
      registry_.get(), fabric_.get());
  if (metrics_endpoint_ != nullptr) {
    metrics_endpoint_->RegisterCollectable(fabric_collector_);
  }
  return absl::OkStatus();
}

void PlannerServer::RefreshFabric(Instant now) {
  for (const fabric::Fabric::Reload& reload : fabric_->Refresh(now.wall)) {
    if (!reload.status.ok()) {
      std::cerr << "monta-planner: " << reload.status.message()
                << "; keeping the content read before" << std::endl;
    } else if (reload.changed) {
      std::cerr << "monta-planner: " << reload.flag
                << " changed: " << reload.nodes << " nodes placed" << std::endl;
    }
  }
  std::set<std::string> disagreeing;
  for (const auto& node : registry_->List(now, /*include_gone=*/false)) {
    const monta::v1::FabricPosition p = fabric_->PositionOf(node);
    if (!p.hint_disagrees()) continue;
    disagreeing.insert(node.name());
    if (hint_disagreements_.count(node.name()) == 0) {
      std::cerr << "monta-planner: node " << node.name() << ": " << p.note()
                << std::endl;
    }
  }
  for (const std::string& node : hint_disagreements_) {
    if (disagreeing.count(node) == 0) {
      std::cerr << "monta-planner: node " << node
                << ": its agent's labels agree with its position again"
                << std::endl;
    }
  }
  hint_disagreements_ = std::move(disagreeing);
}

api::AgentGatewayService::RegisteredCallback PlannerServer::BenchOnRegister() {
  if (!options_.bench_on_register) return nullptr;
  // On the gateway's own thread, after the node is persisted: the schedule
  // writes the task to the store (an etcd round trip on --store=etcd).
  return [this](const std::string& node) {
    const Instant now = Instant::Now();
    auto info = registry_->Get(node, now);
    if (!info.ok() || info->curves_size() > 0) return;
    monta::v1::RunBenchmarkRequest request;
    request.add_nodes(node);
    ScheduleBenchmark(request, now, "schedule_on_register");
  };
}

absl::Status PlannerServer::StartGrpc() {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options_.grpc_security);
  if (!credentials.ok()) return credentials.status();
  authz_ = std::make_unique<api::Authorizer>(
      !options_.grpc_security.insecure, coordinator_.get(), deny_list_.get(),
      planner_metrics_.get(), [this] { return Readable(); });
  gateway_ = std::make_unique<api::AgentGatewayService>(
      registry_.get(), coordinator_.get(), authz_.get(), BenchOnRegister(),
      // No more schedules wait than the coordinator holds tasks.
      options_.coordinator.max_pending_tasks);
  verify::VerifierOptions verifier_options = options_.verifier;
  verifier_options.fabric_tree = FabricTree();
  verifier_ = std::make_unique<verify::Verifier>(
      registry_.get(), coordinator_.get(), knowledge_.get(),
      planner_metrics_.get(), decision_log(), std::move(verifier_options));
  planner_ = std::make_unique<api::PlannerService>(
      registry_.get(), coordinator_.get(), authz_.get(), planner_metrics_.get(),
      decision_log(), knowledge_.get(), verifier_.get(), audit_log(),
      fabric_.get());
  if (fabric_->has_sources()) {
    planner_->SetLevelRound(
        [this](const monta::v1::RunBenchmarkRequest& request) {
          return LevelRound(request, Instant::Now(), nullptr);
        });
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.grpc_address, *credentials, &grpc_port_);
  if (!options_.health_address.empty()) {
    // Plaintext for the kubelet's probes: without a client certificate the
    // Authorizer refuses every Monta RPC here; only health (and reflection)
    // answer.
    builder.AddListeningPort(options_.health_address,
                             grpc::InsecureServerCredentials(), &health_port_);
  }
  // gRPC sets SO_REUSEPORT by default on Linux: a second planner on a bound
  // port would start and silently take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("monta-planner");
  quota.SetMaxThreads(options_.grpc_max_threads);
  quota.Resize(static_cast<size_t>(options_.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  builder.RegisterService(gateway_.get());
  builder.RegisterService(planner_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<RpcMetricsInterceptorFactory>(*metrics_, "planner"));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0 ||
      (!options_.health_address.empty() && health_port_ == 0)) {
    server_.reset();  // nothing listens; Shutdown skips it
    const bool grpc_failed = grpc_port_ == 0;
    const std::string& address =
        grpc_failed ? options_.grpc_address : options_.health_address;
    return absl::UnavailableError(
        absl::StrCat(grpc_failed ? "grpc address " : "health address ", address,
                     ": cannot listen: ", ListenFailureReason(address)));
  }
  server_->GetHealthCheckService()->SetServingStatus(
      monta::v1::Planner::service_full_name(), true);
  server_->GetHealthCheckService()->SetServingStatus(kReadService, true);
  return absl::OkStatus();
}

absl::Status PlannerServer::StartWebhook() {
  if (options_.webhook_address.empty()) return absl::OkStatus();
  admission::AdmissionOptions admission_options;
  // A follower answers reviews from its cache only when it would answer
  // GetStrategy: before its first list it would plan on an empty registry.
  admission_options.ready = [this] { return Readable(); };
  if (options_.webhook_log_decisions) {
    admission_options.log = [](const std::string& line) {
      std::cerr << "monta-planner: " << line << std::endl;
    };
  }
  admission_ = std::make_unique<admission::AdmissionHandler>(
      admission::RegistryDecider(registry_.get(), planner_metrics_.get(),
                                 decision_log(), knowledge_.get(),
                                 FabricTree()),
      planner_metrics_.get(), std::move(admission_options));
  admission::WebhookOptions webhook_options;
  webhook_options.address = options_.webhook_address;
  webhook_options.tls_cert_file = options_.tls_cert_file;
  webhook_options.tls_key_file = options_.tls_key_file;
  webhook_options.client_ca_file = options_.webhook_client_ca_file;
  webhook_options.limits = options_.http_limits;
  auto webhook =
      admission::WebhookServer::Start(webhook_options, admission_.get());
  if (!webhook.ok()) return webhook.status();
  webhook_ = *std::move(webhook);
  return absl::OkStatus();
}

void PlannerServer::WatchStore() {
  if (store_ == nullptr && etcd_store_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  metrics::PlannerMetrics* planner_metrics = planner_metrics_.get();
  coordination::Coordinator* coordinator = coordinator_.get();
  const bool elected = etcd_store_ != nullptr;
  const auto listener = [health, planner_metrics, coordinator, elected](
                            const std::string& operation,
                            const absl::Status& status) {
    if (!status.ok()) planner_metrics->RecordStoreError(operation);
    if (elected && etcd_store::IsFenced(status)) {
      // etcd refused this term's fence: another replica leads. Stop at once
      // (the election's own notice follows within moments).
      coordinator->Follow(std::string(status.message()), Instant::Now());
    }
    // Every failure (not only the first): a success of another operation
    // may have marked the service SERVING in between.
    health->SetServingStatus(monta::v1::Planner::service_full_name(),
                             status.ok());
    // An elected replica's read health is FollowStore's.
    if (!elected) health->SetServingStatus(kReadService, status.ok());
  };
  if (store_ != nullptr) store_->SetWriteListener(listener);
  if (etcd_store_ != nullptr) etcd_store_->SetWriteListener(listener);
}

void PlannerServer::ScheduleBenchmark(
    const monta::v1::RunBenchmarkRequest& request, Instant now,
    const std::string& site) {
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> scheduled =
      coordinator_->Schedule(request, now);
  if (scheduled.ok()) return;
  // Nobody waits for these tasks: the error ends here, logged and counted.
  std::cerr << "monta-planner: benchmark of "
            << absl::StrJoin(request.nodes(), ",") << " not scheduled (" << site
            << "): " << scheduled.status() << std::endl;
  planner_metrics_->RecordDiscardedError(site);
}

void PlannerServer::Maintain() {
  // Once a second: fail benchmark tasks past their deadline, and the tasks of
  // nodes whose lease expired (their agent died mid-run); remove nodes gone
  // for good; now and then, re-read the fabric sources and prune the decision
  // history.
  MonoTime last_periodic = std::chrono::steady_clock::now();
  MonoTime last_prune = MonoTime::min();
  MonoTime last_deny_list = std::chrono::steady_clock::now();
  const absl::Duration deny_list_refresh =
      absl::Seconds(std::max(1, options_.grpc_security.refresh_seconds));
  MonoTime last_fabric = MonoTime::min();
  while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    const Instant now = Instant::Now();
    FollowElection();
    coordinator_->ExpireOverdue(now);
    // WatchTasks streams hold no thread that could notice an expired lease.
    gateway_->ExpireWatches(now);
    const bool leading = coordinator_->CheckLeading().ok();
    if (leading && options_.bench_interval > absl::ZeroDuration() &&
        MonoSince(last_periodic, now.mono) >= options_.bench_interval) {
      last_periodic = now.mono;
      SchedulePeriodicBenchmarks(now);
    }
    for (const std::string& node : registry_->StaleNodes(now)) {
      coordinator_->FailTasksOfNode(node, "lost its lease", now);
    }
    if (MonoSince(last_deny_list, now.mono) >= deny_list_refresh) {
      last_deny_list = now.mono;
      RefreshDenyList();
    }
    if (last_fabric == MonoTime::min() ||
        MonoSince(last_fabric, now.mono) >= options_.fabric_refresh) {
      last_fabric = now.mono;
      RefreshFabric(now);
    }
    // A follower's registry is its cache of etcd: only the leader removes.
    if (leading) RemoveGoneNodes(now);
    if (last_prune == MonoTime::min() ||
        MonoSince(last_prune, now.mono) >= options_.prune_interval) {
      last_prune = now.mono;
      PruneDecisions(now);
    }
  }
}

void PlannerServer::RemoveGoneNodes(Instant now) {
  const std::vector<std::string> removed = registry_->RemoveGone(now);
  if (removed.empty()) return;
  std::cerr << "monta-planner: removed " << removed.size()
            << " node(s) not heard from for "
            << absl::FormatDuration(options_.registry.gone_after)
            << " (--gone_after_seconds): " << absl::StrJoin(removed, ",")
            << std::endl;
}

store::DecisionLog* PlannerServer::decision_log() const {
  if (record_writer_ != nullptr) return record_writer_.get();
  return store_.get();
}

store::AuditLog* PlannerServer::audit_log() const {
  if (record_writer_ != nullptr) return record_writer_.get();
  return store_.get();
}

void PlannerServer::PruneDecisions(Instant now) {
  // Retention is about stored records, so it is measured on the wall time
  // they carry. In etcd every replica's records are one set: the leader alone
  // deletes.
  absl::StatusOr<int64_t> pruned = 0;
  if (record_writer_ != nullptr) {
    if (!coordinator_->CheckLeading().ok()) return;
    pruned = record_writer_->PruneDecisions(
        now.wall - options_.decision_retention, options_.max_decisions);
    if (!pruned.ok()) {
      std::cerr << "monta-planner: pruning decisions in etcd: "
                << pruned.status().message() << std::endl;
      planner_metrics_->RecordDiscardedError("prune_records");
    }
  } else if (store_ != nullptr) {
    pruned = store_->PruneDecisions(now.wall - options_.decision_retention,
                                    options_.max_decisions);
  }
  // A failure is logged, counted and reflected in health by the store.
  if (!pruned.ok() || *pruned == 0) return;
  std::cerr << "monta-planner: pruned " << *pruned
            << " decision(s) (--decision_retention_seconds, --max_decisions)"
            << std::endl;
}

bool PlannerServer::Idle(const monta::v1::NodeInfo& node) const {
  return node.state() == monta::v1::NODE_STATE_ALIVE &&
         !coordinator_->Busy(node.name());
}

absl::StatusOr<monta::v1::RunBenchmarkReply> PlannerServer::LevelRound(
    const monta::v1::RunBenchmarkRequest& request, Instant now,
    std::vector<std::string>* outside) {
  const std::vector<monta::v1::NodeInfo> nodes =
      registry_->List(now, /*include_gone=*/false);
  std::map<std::string, bool> idle;
  for (const auto& node : nodes) idle[node.name()] = Idle(node);
  fabric::Fabric::Round round = fabric_->PlanRound(
      nodes, [&idle](const std::string& name) { return idle[name]; },
      options_.fabric_sample_nodes, request.dry_run(), now.wall);
  monta::v1::RunBenchmarkReply reply;
  for (const fabric::LevelTask& task : round.plan.tasks) {
    monta::v1::RunBenchmarkRequest one;
    for (const std::string& node : task.nodes) one.add_nodes(node);
    one.set_ranks_per_node(request.ranks_per_node());
    one.set_min_bytes(request.min_bytes());
    one.set_max_bytes(request.max_bytes());
    one.set_timeout_seconds(request.timeout_seconds());
    if (request.dry_run()) {
      monta::v1::BenchmarkTaskStatus* planned = reply.add_fabric_tasks();
      *planned->mutable_nodes() = one.nodes();
      *planned->mutable_fabric() = task.span;
      continue;
    }
    absl::StatusOr<monta::v1::BenchmarkTaskStatus> scheduled =
        coordinator_->Schedule(one, now);
    if (scheduled.ok()) {
      *reply.add_fabric_tasks() = *std::move(scheduled);
    } else if (scheduled.status().code() ==
               absl::StatusCode::kInvalidArgument) {
      return scheduled.status();
    } else {
      reply.add_notes(
          absl::StrCat(ShortName(task.span.level()), " task on ",
                       absl::StrJoin(task.nodes, ","),
                       " not scheduled: ", scheduled.status().message()));
      planner_metrics_->RecordDiscardedError("schedule_fabric_level");
    }
  }
  for (const std::string& note : round.plan.notes) reply.add_notes(note);
  if (!round.outside.empty()) {
    reply.add_notes(absl::StrCat(
        round.outside.size(),
        " idle node(s) outside the fabric keep pair measurements (the "
        "periodic schedule pairs them by name)"));
  }
  if (outside != nullptr) *outside = std::move(round.outside);
  return reply;
}

void PlannerServer::SchedulePeriodicBenchmarks(Instant now) {
  std::vector<std::string> idle;
  for (const auto& node : registry_->List(now, /*include_gone=*/false)) {
    if (Idle(node)) idle.push_back(node.name());
  }
  // Pairs first: they bound most decisions. With a fabric, the level round
  // measures the nodes it places (a number of tasks that grows with the
  // racks), and only the nodes outside it pair up by name.
  std::vector<std::string> paired = idle;
  if (fabric_->has_sources()) {
    monta::v1::RunBenchmarkRequest defaults;
    absl::StatusOr<monta::v1::RunBenchmarkReply> round =
        LevelRound(defaults, now, &paired);
    if (!round.ok()) {
      std::cerr << "monta-planner: fabric level round not scheduled: "
                << round.status() << std::endl;
      planner_metrics_->RecordDiscardedError("schedule_fabric_level");
      paired.clear();
    } else {
      for (const std::string& note : round->notes()) {
        std::cerr << "monta-planner: fabric level round: " << note << std::endl;
      }
    }
  }
  for (size_t i = 0; i + 1 < paired.size(); i += 2) {
    monta::v1::RunBenchmarkRequest pair;
    pair.add_nodes(paired[i]);
    pair.add_nodes(paired[i + 1]);
    ScheduleBenchmark(pair, now, "schedule_periodic");
  }
  for (const std::string& node : idle) {
    monta::v1::RunBenchmarkRequest single;
    single.add_nodes(node);
    ScheduleBenchmark(single, now, "schedule_periodic");
  }
}

void PlannerServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (election_ != nullptr) {
    // Hand over at once (the next replica leads when it sees the key go),
    // not after the lease's TTL.
    const MonoTime started = std::chrono::steady_clock::now();
    const absl::Status resigned = election_->Resign();
    std::cerr << "monta-planner: resigned from the election in "
              << absl::FormatDuration(
                     MonoSince(started, std::chrono::steady_clock::now()))
              << (resigned.ok()
                      ? std::string()
                      : absl::StrCat(" (", resigned.message(),
                                     "; the key goes with its lease)"))
              << std::endl;
  }
  stop_.Notify();
  // Within one watch poll; it sets health, so before the server goes.
  if (follow_thread_.joinable()) follow_thread_.join();
  if (liveness_thread_.joinable()) liveness_thread_.join();
  // Start may have failed part way: each member is null until its step ran.
  if (store_ != nullptr) store_->SetWriteListener(nullptr);
  if (etcd_store_ != nullptr) etcd_store_->SetWriteListener(nullptr);
  if (webhook_ != nullptr) webhook_->Shutdown();
  if (coordinator_ != nullptr) coordinator_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(GrpcDeadline(grace));
    server_->Wait();
  }
  if (maintenance_.joinable()) maintenance_.join();
  // Scrapes read the registry: none may run once members go.
  if (metrics_endpoint_ != nullptr) metrics_endpoint_->Shutdown();
}

PlannerServer::~PlannerServer() { Shutdown(); }

}  // namespace monta
