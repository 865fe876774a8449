// The planner process in one object: registry, benchmark coordinator, gRPC
// services (with health checking and reflection) and the Prometheus /metrics
// endpoint.
// main.cc wraps it in flags and signal handling; tests start it in-process.
#ifndef MONTA_SERVER_PLANNER_SERVER_H_
#define MONTA_SERVER_PLANNER_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_security.h"
#include "common/http/http_server.h"
#include "common/http/metrics_endpoint.h"
#include "grpcpp/server.h"
#include "prometheus/registry.h"
#include "server/admission/admission_handler.h"
#include "server/admission/webhook_server.h"
#include "server/api/agent_gateway_service.h"
#include "server/api/authz.h"
#include "server/api/deny_list.h"
#include "server/api/planner_service.h"
#include "server/bench/coordinator.h"
#include "server/election/election.h"
#include "server/etcd/client.h"
#include "server/etcd_store/attachments.h"
#include "server/etcd_store/etcd_store.h"
#include "server/etcd_store/record_writer.h"
#include "server/fabric/fabric.h"
#include "server/metrics/planner_metrics.h"
#include "server/planning/calibration.h"
#include "server/registry/registry.h"
#include "server/store/follower.h"
#include "server/store/knowledge_store.h"
#include "server/store/sqlite_store.h"
#include "server/store/store.h"
#include "server/verify/verifier.h"

namespace monta {

struct PlannerOptions {
  // gRPC listen address; port 0 picks a free port (see grpc_port()).
  std::string grpc_address = "127.0.0.1:7400";
  // How the gRPC API is protected: mutual TLS (client certificates required,
  // verified, and authorizing each call; see server/api/authz.h) or, when
  // `insecure`, plaintext with authorization off. The default is neither and
  // refuses to start.
  GrpcSecurityOptions grpc_security;
  // Identities refused on every call, from the moment the file names them
  // (server/api/deny_list.h): re-read every grpc_security.refresh_seconds, as
  // the certificates are; open WatchTasks streams of a denied node end. Needs
  // mutual TLS. Empty = none.
  std::string deny_list_file;
  // A second, plaintext gRPC port for health checks only (kubelet gRPC probes
  // cannot present a client certificate): the standard health service
  // answers there, every Monta RPC is refused UNAUTHENTICATED (no client
  // certificate) unless grpc_security.insecure. Empty = none; port 0 picks one.
  std::string health_address;
  // Prometheus /metrics address; empty disables it; port 0 picks one.
  std::string metrics_address = "127.0.0.1:7401";
  // Deadlines and connection caps of /metrics and the webhook (--http_*).
  http::HttpLimits http_limits;
  // The gRPC server's grpc::ResourceQuota: threads for the synchronous
  // services (health checking, reflection; the planner's own services use the
  // callback API and hold no thread per call) and the memory of all
  // connections' buffers, beyond which gRPC refuses new streams.
  int grpc_max_threads = 32;
  int64_t grpc_memory_bytes = int64_t{256} << 20;
  registry::RegistryOptions registry;
  coordination::CoordinatorOptions coordinator;
  // montactl verify's defaults and thresholds (--verify_max_spread_ratio).
  verify::VerifierOptions verifier;
  // Schedule an intra-node sweep when a node registers without measured curves.
  bool bench_on_register = false;
  // Re-measure periodically: every interval, each alive idle node gets an
  // intra-node sweep; with a fabric, a round of level measurements over the
  // idle nodes it places (server/fabric/levels.h: a pair inside each rack, a
  // pair and up to fabric_sample_nodes nodes a side at once across each rack
  // and the next), and each pair of neighbouring idle nodes (by name) outside
  // the fabric, or of all idle nodes without one, an inter-node sweep. Zero
  // disables.
  absl::Duration bench_interval = absl::ZeroDuration();
  // Nodes of one rack in a level task across two racks (>= 1).
  int fabric_sample_nodes = 4;
  // Where nodes sit in the network fabric (server/fabric/fabric.h): the
  // operator's fabric map and the nodes' Kubernetes labels, files re-read
  // every fabric_refresh when they changed. A file that does not parse at
  // start stops Start with one line; later the previous content stays.
  fabric::FabricOptions fabric;
  absl::Duration fabric_refresh = absl::Seconds(10);
  // Where nodes, curves and what verify runs taught the planner are kept:
  // "sqlite" (db_path, or memory without it; one replica, no election) or
  // "etcd" (EtcdStore under etcd_prefix on the etcd of `etcd`; db_path must
  // be empty: decisions, verifications and the audit log go to etcd too). With
  // etcd every replica campaigns (server/election, under etcd_prefix without
  // its last '/'); only the leader serves: it takes its registry over from
  // its follower's cache (or reloads it from etcd) when it starts leading,
  // writes under the election's fence and coordinates
  // benchmarks; a follower refuses every Monta RPC with UNAVAILABLE naming the
  // leader's address.
  std::string store = "sqlite";
  etcd::ClientOptions etcd;
  std::string etcd_prefix = "/monta/v1/";
  // With etcd: the election's lease TTL (how long a dead leader keeps
  // leading at most), this replica's candidate name (unique among the
  // replicas; empty: <hostname>-<pid>) and the address it publishes for
  // clients (empty: the gRPC listen address with its bound port, the
  // hostname for a wildcard host).
  absl::Duration leader_lease = absl::Seconds(10);
  // A follower is readable while its cache lags the store by at most this
  // (store::Follower::lag).
  absl::Duration follower_max_lag = absl::Seconds(5);
  // How often this replica writes the liveness of the agents heartbeating to
  // it (their attachments, server/etcd_store/attachments.h): one batch of
  // what changed per interval at most, nothing when nothing changed.
  absl::Duration liveness_publish = absl::Seconds(2);
  // How long a decision, verification or audit call waits at most for its
  // record's etcd Txn (etcd_store::RecordWriterOptions::commit_timeout).
  absl::Duration record_commit_timeout = absl::Seconds(5);
  std::string replica_id;
  std::string advertise_address;
  // SQLite file for nodes and curve history; empty keeps state in memory only.
  std::string db_path;
  // A corrupt db_path (not a database, quick_check fails, a row does not
  // parse) is moved aside (kept, its new name logged) and a fresh one started,
  // instead of refusing to start.
  bool db_reset_corrupt = false;
  // Kubernetes admission webhook (HTTPS, /mutate /validate /healthz, see
  // server/admission/): listen address, empty = off; port 0 picks one.
  std::string webhook_address;
  // PEM certificate chain and key of the webhook (re-read when they change).
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle: when set, the webhook requires a client certificate it
  // signed (the API server's), see WebhookOptions::client_ca_file.
  std::string webhook_client_ca_file;
  // Decision history (with db_path): decisions older than this, and all but
  // the newest max_decisions, are deleted in the background.
  absl::Duration decision_retention = absl::Hours(24 * 7);
  int64_t max_decisions = 100000;
  // How often the background loop prunes decisions.
  absl::Duration prune_interval = absl::Seconds(10);
  // Log one line per admission decision (namespace/name, decision id,
  // strategy).
  bool webhook_log_decisions = true;
};

// The gRPC health service name that says whether a replica answers the
// read-only RPCs (GetStrategy, ListNodes, GetNode, ListProfiles, GetFabric,
// ListCurves): SERVING on the leader and on a follower whose watch-fed cache
// is in sync (store::Follower); monta.v1.Planner stays SERVING on the leader
// only. Without an election both follow the store's health.
inline constexpr char kReadService[] = "monta.v1.Planner.read";

class PlannerServer {
 public:
  // Starts serving. Fails, with one line naming the flag's value and the
  // reason, when an address cannot be bound or the database is unusable (see
  // store::SqliteStore::Open).
  static absl::StatusOr<std::unique_ptr<PlannerServer>> Start(
      PlannerOptions options);
  ~PlannerServer();

  int grpc_port() const { return grpc_port_; }
  // 0 when there is no health port.
  int health_port() const { return health_port_; }
  int metrics_port() const { return metrics_port_; }
  // 0 when the webhook is off.
  int webhook_port() const {
    return webhook_ != nullptr ? webhook_->port() : 0;
  }
  registry::Registry& registry() { return *registry_; }
  coordination::Coordinator& coordinator() { return *coordinator_; }
  prometheus::Registry& metrics() { return *metrics_; }
  const fabric::Fabric& fabric() const { return *fabric_; }
  metrics::PlannerMetrics& planner_metrics() { return *planner_metrics_; }
  // With --store=etcd: the epoch this replica leads with now (nullopt while
  // it follows, or without an election).
  std::optional<int64_t> leader_epoch() const;

  // Stops accepting calls, ends streams, waits up to `grace` for calls in
  // flight. Safe after a Start that failed part way (the destructor calls it).
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  explicit PlannerServer(PlannerOptions options);
  // The steps of Start, in order; each fails only when a resource (an address,
  // the database) is unusable.
  absl::Status StartMetrics();
  absl::Status OpenRegistry();
  // Opens --db into store_ and loads it into the registry, moving a corrupt
  // file aside first when options_.db_reset_corrupt says so.
  absl::Status OpenStore();
  absl::Status OpenAndLoadStore();
  // Counts a stored curve the registry refused on load (LoadInto's and the
  // follower's on_discarded).
  std::function<void(const std::string&)> DiscardedRecorder();
  // Replaces the plan knowledge with the store's (malformed records counted
  // and skipped); false when the store cannot be listed (logged).
  bool LoadKnowledge(store::KnowledgeStore& store);
  // The plan knowledge's writes to `store` under `fence`.
  static planning::PlanKnowledge::Writer KnowledgeWriter(
      store::KnowledgeStore* store, store::Fence fence);
  // --store=etcd: connects and checks the schema; the registry is loaded
  // when this replica starts leading.
  absl::Status OpenEtcdStore();
  // --store=etcd, once gRPC listens: campaigns (server/election).
  absl::Status StartElection();
  // The election's callbacks, and the maintenance loop's retry of a term
  // whose start failed: take the registry over (TakeOverRegistry), take the
  // term's fence and coordinate; or stop at once (tasks fail "leader
  // changed").
  void StartLeading(int64_t epoch) ABSL_LOCKS_EXCLUDED(term_mu_);
  void StopLeading(int64_t epoch, const std::string& why);
  // StartLeading's part under term_mu_: true when the term of `epoch`
  // started (false: it runs already, is not this replica's, or failed;
  // Maintain retries).
  bool StartTerm(int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(term_mu_);
  // A new leader's registry as etcd holds it: the follower's cache, paused
  // once it applied the newest commit (read after the election), or, when it
  // is not known to be in sync, a reload. Says which in `from`; the List's
  // error when the reload failed.
  absl::Status TakeOverRegistry(std::string* from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(term_mu_);
  // A follower's look at who leads (named in its refusals); a leader whose
  // term did not start retries it.
  void FollowElection();
  // --store=etcd: the follower thread's loop (follower_->Step) and the read
  // health it keeps (kReadService: SERVING while leading or in sync).
  void FollowStore();
  // A new leader's EtcdStore::WarmUp, on the follower's thread (logged).
  void WarmUpWriter();
  // --store=etcd: starts this replica's attachments (StartLiveness) and the
  // thread that publishes them every options_.liveness_publish and follows
  // every replica's into the registry (FollowLiveness).
  absl::Status StartLiveness();
  void FollowLiveness();
  // OK when this replica may answer read-only RPCs: it leads, or its
  // follower's cache is in sync; else why not (the leader named).
  absl::Status Readable() const;
  void StartCoordinator();
  // The coordinator leads with `epoch`, its task queue on `tasks` (listed
  // now, written under `fence` from now on); logs what it restored. False
  // when the store cannot be listed (nothing changed).
  bool LeadWithTasks(int64_t epoch, store::TaskStore& tasks,
                     store::Fence fence);
  // Reads options_.deny_list_file (none when empty).
  absl::Status LoadDenyList();
  // Reads the fabric sources (options_.fabric) and exports their metrics.
  absl::Status OpenFabric();
  // The fabric tree verify and the admission webhook plan with, read as
  // GetStrategy reads it; none without fabric sources.
  planning::FabricTreeSource FabricTree() const;
  absl::Status StartGrpc();
  absl::Status StartWebhook();
  // Health of the monta.v1.Planner service follows the store's writes:
  // NOT_SERVING after a failed write, SERVING again after a successful one.
  void WatchStore();
  // The background loop: deadlines, lost leases, periodic benchmarks, gone
  // nodes, decision pruning. Every interval on the monotonic clock.
  void Maintain();
  // Removes the nodes quiet for gone_after (registry and store), logged.
  void RemoveGoneNodes(Instant now);
  // The leader's (or the single replica's) retention of decisions, in etcd
  // with --store=etcd, else in --db.
  void PruneDecisions(Instant now);
  // Where decisions, verifications and audit entries go: etcd's records with
  // --store=etcd, else --db (null without one).
  store::DecisionLog* decision_log() const;
  store::AuditLog* audit_log() const;
  // Re-reads the deny list (a bad file keeps the previous one, logged and
  // counted) and ends the WatchTasks streams it now denies.
  void RefreshDenyList();
  // Re-reads the fabric sources that changed (each read logged and counted;
  // a bad file keeps the previous content) and logs the nodes whose agents
  // newly disagree with their position, or no longer do.
  void RefreshFabric(Instant now);
  // Schedules a benchmark nobody waits for (on registration, periodic): a
  // failure is logged and counted under `site`.
  void ScheduleBenchmark(const monta::v1::RunBenchmarkRequest& request,
                         Instant now, const std::string& site);
  // The gateway's registered callback: --bench_on_register's intra-node
  // sweep of a node without curves (null without the flag).
  api::AgentGatewayService::RegisteredCallback BenchOnRegister();
  // Schedules the periodic sweeps (see PlannerOptions::bench_interval).
  void SchedulePeriodicBenchmarks(Instant now);
  // One round of fabric level measurements (RunBenchmark with fabric_levels,
  // and each periodic round): plans it over the alive idle nodes the fabric
  // places and, unless request.dry_run, schedules its tasks with the
  // request's ranks_per_node, byte range and timeout. A task that cannot be
  // scheduled (a node's queue full, a node gone) is a note; a request the
  // coordinator refuses (INVALID_ARGUMENT) is the error. `outside` (may be
  // null) receives the idle nodes no source places.
  absl::StatusOr<monta::v1::RunBenchmarkReply> LevelRound(
      const monta::v1::RunBenchmarkRequest& request, Instant now,
      std::vector<std::string>* outside);
  // True when the node is alive and in no unfinished task.
  bool Idle(const monta::v1::NodeInfo& node) const;

  const PlannerOptions options_;
  std::shared_ptr<prometheus::Registry> metrics_;
  std::unique_ptr<http::MetricsEndpoint> metrics_endpoint_;
  std::unique_ptr<metrics::PlannerMetrics> planner_metrics_;
  std::unique_ptr<registry::Registry> registry_;
  // Where the registry's state is kept; members are destroyed in reverse, so
  // the gRPC server (declared below) is gone before the store, and the store
  // before the registry.
  std::unique_ptr<store::SqliteStore> store_;
  // With --store=etcd: the client and the store the registry writes through
  // (store_, if any, then holds nothing: records go to record_writer_).
  std::unique_ptr<etcd::Client> etcd_client_;
  std::unique_ptr<etcd_store::EtcdStore> etcd_store_;
  // With --store=etcd: this replica's decisions, verifications and audit
  // entries, queued and written to etcd (not --db).
  std::unique_ptr<etcd_store::RecordWriter> record_writer_;
  // With --store=etcd: the registry's observer, writing under the current
  // term's fence (nothing while following), and the election.
  class TermWriter;
  std::unique_ptr<TermWriter> term_writer_;
  std::unique_ptr<election::Election> election_;
  // With --store=etcd: the registry as etcd holds it while this replica
  // follows (paused while it leads), and the thread that steps it.
  std::unique_ptr<store::Follower> follower_;
  // With --store=etcd: the plan knowledge (knowledge_) as etcd holds it while
  // this replica follows (paused while it leads), stepped by the same thread.
  std::unique_ptr<store::KnowledgeFollower> knowledge_follower_;
  std::thread follow_thread_;
  // With --store=etcd: this replica's agents' attachments (on its own lease)
  // and every replica's, followed into the registry; the thread that
  // publishes and follows them.
  std::unique_ptr<etcd_store::Attachments> attachments_;
  std::thread liveness_thread_;
  std::string replica_id_;
  std::string advertise_address_;
  // Serializes StartLeading and StopLeading; the epoch whose term runs (0:
  // none).
  absl::Mutex term_mu_;
  int64_t term_epoch_ ABSL_GUARDED_BY(term_mu_) = 0;
  // A term started: the follower's thread lists the store writer's mirror
  // (EtcdStore::WarmUp) off the election's thread.
  std::atomic<bool> warm_up_writer_{false};
  // The registry's observer: its changes committed to store_ under the fence
  // store_->Lead() gave this process. Destroyed before store_.
  std::unique_ptr<store::RegistryWriter> registry_writer_;
  // That fence (--store=sqlite with --db): the task queue writes under it too.
  store::Fence sqlite_fence_;
  std::shared_ptr<metrics::ClusterCollector> cluster_collector_;
  std::shared_ptr<metrics::HeldBytesCollector> held_bytes_;
  std::unique_ptr<fabric::Fabric> fabric_;
  std::shared_ptr<metrics::FabricCollector> fabric_collector_;
  // Nodes whose agents disagree with their position, as last logged (the
  // maintenance thread's only).
  std::set<std::string> hint_disagreements_;
  std::unique_ptr<coordination::Coordinator> coordinator_;
  // What verify runs taught the planner (calibration per node set, verified
  // replies per job): loaded from the store (--db, or etcd when leading),
  // written through it, followed from etcd while following.
  std::unique_ptr<planning::PlanKnowledge> knowledge_;
  std::unique_ptr<verify::Verifier> verifier_;
  std::unique_ptr<api::DenyList> deny_list_;
  std::unique_ptr<api::Authorizer> authz_;
  std::unique_ptr<api::AgentGatewayService> gateway_;
  std::unique_ptr<api::PlannerService> planner_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<admission::AdmissionHandler> admission_;
  std::unique_ptr<admission::WebhookServer> webhook_;
  int grpc_port_ = 0;
  int health_port_ = 0;
  int metrics_port_ = 0;
  MonoNotification stop_;
  std::thread maintenance_;
  bool shut_down_ = false;
};

}  // namespace monta

#endif  // MONTA_SERVER_PLANNER_SERVER_H_
