// monta-planner: the cluster's planner. See README.md for flags and the quick
// start.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/grpc_security_flags.h"
#include "common/http/http_flags.h"
#include "common/http/http_server.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "server/fabric/node_labels.h"
#include "server/migrate_from_sqlite.h"
#include "server/planner_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7400",
          "gRPC listen address (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:7401",
          "Prometheus /metrics listen address; empty disables");
ABSL_FLAG(double, lease_seconds, 15,
          "node lease: a node without heartbeat is stale after it");
ABSL_FLAG(double, heartbeat_seconds, 5,
          "heartbeat interval the agents are told to use");
ABSL_FLAG(double, gone_after_seconds, 3600,
          "a node not heard from this long (stale, or deregistered) is removed "
          "with its curves, from memory and --db; more than --lease_seconds");
ABSL_FLAG(int, max_events_per_node, 64,
          "topology change events kept per node (a ring: the oldest goes "
          "first)");
ABSL_FLAG(int, max_nodes_per_page, 500,
          "nodes in one ListNodes reply: the default page size and the "
          "largest one a caller gets");
ABSL_FLAG(double, decision_retention_seconds, 7 * 24 * 3600,
          "decisions older than this are deleted in the background (in --db; "
          "with --store=etcd in etcd's records/, by the leader)");
ABSL_FLAG(int64_t, max_decisions, 100000,
          "decisions kept (in --db; with --store=etcd in etcd's records/, "
          "by the leader); the oldest beyond it are deleted in the "
          "background (about 1 KB each)");
ABSL_FLAG(bool, bench_on_register, true,
          "measure a node (intra-node sweep) when it registers without curves");
ABSL_FLAG(double, bench_timeout_seconds, 120,
          "default deadline of a benchmark task");
ABSL_FLAG(double, bench_interval_seconds, 3600,
          "re-measure idle nodes (intra-node) and, with a fabric, its levels "
          "(a pair inside each rack, a pair and --fabric_sample_nodes nodes "
          "a side at once across each rack and the next), else neighbouring "
          "pairs (inter-node), this often; 0 disables");
ABSL_FLAG(int, cpu_ranks_per_node, 2,
          "ranks per node of a benchmark on nodes without GPUs when the "
          "request does not say (1..64)");
ABSL_FLAG(std::string, db, "",
          "SQLite file for nodes, measured curves, calibrations and verified "
          "replies (created if missing); empty keeps state in memory only; "
          "refused with --store=etcd");
ABSL_FLAG(std::string, store, "sqlite",
          "where nodes and curves are kept: sqlite (--db, or memory without "
          "it; one replica) or etcd (--etcd_endpoints; several replicas may "
          "run: they elect one leader, which alone serves, and the others "
          "answer UNAVAILABLE naming it; every replica writes its decisions, "
          "verifications and audit entries to etcd's records/ and the leader "
          "its calibrations to knowledge/, so --db is refused)");
ABSL_FLAG(std::string, etcd_endpoints, "",
          "with --store=etcd: host:port of the etcd members, comma-separated "
          "(1..16)");
ABSL_FLAG(std::string, etcd_prefix, "/monta/v1/",
          "with --store=etcd: the key prefix of this planner's state");
ABSL_FLAG(std::string, etcd_ca_file, "",
          "with --store=etcd: PEM CA bundle that signs etcd's certificates");
ABSL_FLAG(std::string, etcd_cert_file, "",
          "with --store=etcd: PEM client certificate chain presented to etcd");
ABSL_FLAG(std::string, etcd_key_file, "",
          "with --store=etcd: PEM private key of --etcd_cert_file");
ABSL_FLAG(double, leader_lease_seconds, 10,
          "with --store=etcd: the election lease's TTL, how long a dead "
          "leader keeps leading at most before another replica takes over "
          "(whole seconds, 1..3600; SIGTERM hands over at once); also the "
          "TTL of each replica's attachment lease, how long a dead "
          "replica's agents still count as alive at most");
ABSL_FLAG(std::string, replica_id, "",
          "with --store=etcd: this replica's name in the election, unique "
          "among the replicas ([A-Za-z0-9._-]; e.g. the pod name); empty = "
          "<hostname>-<pid>");
ABSL_FLAG(std::string, advertise_address, "",
          "with --store=etcd: the host:port this replica publishes as the "
          "leader's address (followers name it in their refusals); empty = "
          "--listen's host with the bound port, the hostname for 0.0.0.0");
ABSL_FLAG(double, follower_max_lag_seconds, 5,
          "with --store=etcd: a follower answers reads (monta.v1.Planner.read "
          "SERVING) only while its cache holds every commit older than this "
          "(0.5..3600; monta_store_follower_lag_seconds)");
ABSL_FLAG(double, liveness_publish_seconds, 2,
          "with --store=etcd: how often a replica writes the liveness of the "
          "agents heartbeating to it (their attachments, added and removed "
          "in one batch of what changed; nothing when nothing did), never "
          "per heartbeat (0.1..60)");
ABSL_FLAG(double, record_commit_timeout_seconds, 5,
          "with --store=etcd: how long a GetStrategy, admission or verify "
          "call waits at most for its record's etcd Txn (group commit: a "
          "decision is answered only once its record is stored); past it the "
          "call fails UNAVAILABLE, not stored (0.5..60; an etcd leader "
          "election takes about 2 s)");
ABSL_FLAG(bool, etcd_insecure, false,
          "with --store=etcd: plaintext to etcd, no certificates (loopback "
          "tests and demos only)");
ABSL_FLAG(std::string, migrate_from_sqlite, "",
          "with --store=etcd: copy this SQLite store file (a --db) into "
          "--etcd_prefix (nodes, the kept curve history, calibrations and "
          "verified replies, decisions, verifications, the audit log), print "
          "the counts per kind and exit; "
          "no server starts. Stop the SQLite planner first");
ABSL_FLAG(bool, migrate_into_nonempty, false,
          "with --migrate_from_sqlite: copy into a prefix that already holds "
          "keys (refused otherwise), putting the file's records over them");
ABSL_FLAG(bool, db_reset_corrupt, false,
          "when --db is corrupt (not a SQLite database, PRAGMA quick_check "
          "fails, a row does not parse), rename it to <db>.corrupt-<UTC time> "
          "(kept, its name logged) and start an empty database instead of "
          "refusing to start");
ABSL_FLAG(std::string, webhook_listen, "",
          "Kubernetes admission webhook HTTPS listen address (POST /mutate, "
          "/validate; GET "
          "/healthz), e.g. 0.0.0.0:8443; empty disables; needs --tls_cert and "
          "--tls_key");
ABSL_FLAG(
    std::string, tls_cert, "",
    "PEM certificate chain of the webhook (re-read when the file changes)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the webhook");
ABSL_FLAG(std::string, webhook_client_ca_file, "",
          "PEM CA bundle; when set, the webhook requires a client certificate "
          "it signed (the API server's, configured with an "
          "AdmissionConfiguration kubeconfig); empty = any client");
ABSL_FLAG(std::string, health_listen, "",
          "plaintext gRPC port for health checks only (kubelet gRPC probes "
          "present no client certificate), e.g. 0.0.0.0:7404: "
          "grpc.health.v1 answers there, every Monta RPC is refused "
          "UNAUTHENTICATED; empty disables");
ABSL_FLAG(int, max_topology_string_bytes, 256,
          "longest name, id or address an agent may report in its topology "
          "(hostname, GPU uuid, NIC state, PCI address, ...); longer ones get "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_topology_text_bytes, 4096,
          "longest free text an agent may report in its topology (the "
          "*_status strings, a NUMA node's cpu_list)");
ABSL_FLAG(int, max_topology_entries, 64,
          "most GPUs, NIC ports, NUMA nodes or labels in one node's topology "
          "(GPU indices in 0..N-1)");
ABSL_FLAG(int, max_curves_per_node, 1024,
          "measured curves kept per node (a distinct collective, scope, "
          "backend, strategy, chunks, ranks and node set each); a new one "
          "over it is refused, a re-measurement replaces its predecessor");
ABSL_FLAG(int, max_pending_registry_changes, 4096,
          "registry changes (registrations, deregistrations, topology "
          "changes, curves) waiting for the store at most; over it an "
          "agent's Register, Deregister, topology-changing Heartbeat or a "
          "task's last ReportBenchmark (its curves) is refused "
          "RESOURCE_EXHAUSTED (the agent backs off and sends it again) "
          "instead of queueing; a retry of a node whose change still waits "
          "replaces it");
ABSL_FLAG(int, max_curves_per_report, 64,
          "series (curves to be) one ReportBenchmark may carry");
ABSL_FLAG(int, max_points_per_curve, 1024,
          "sizes (points to be) one reported series may carry");
ABSL_FLAG(double, node_agreement_factor, 4,
          "a benchmark curve is excluded (not planned with) when at some "
          "size one node's median rank time is more than this many times "
          "another node's (docs/ARCHITECTURE.md says why 4)");
ABSL_FLAG(double, node_agreement_slack_seconds, 0.005,
          "... and more than this many seconds above it (a shared host's "
          "scheduling; docs/ARCHITECTURE.md says why 5 ms)");
ABSL_FLAG(double, verify_max_spread_ratio, 0.25,
          "montactl verify: a candidate whose timed iterations spread more "
          "than this share of their median (p90 - p10, slowest rank per "
          "iteration) is noisy: shown, not used to calibrate; 0.01..10");
ABSL_FLAG(int, max_pending_tasks_per_node, 16,
          "unfinished (pending or running) benchmark tasks per node; more are "
          "refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_pending_tasks, 1024, "unfinished benchmark tasks in all");
ABSL_FLAG(int, max_rendezvous_keys_per_task, 4096,
          "rendezvous keys one benchmark task may set");
ABSL_FLAG(int64_t, max_rendezvous_value_bytes, 1 << 20,
          "bytes of one rendezvous value");
ABSL_FLAG(int64_t, max_rendezvous_bytes_per_task, 64 << 20,
          "bytes of all rendezvous keys and values of one benchmark task");
ABSL_FLAG(int64_t, max_rendezvous_bytes, int64_t{256} << 20,
          "bytes of rendezvous keys and values of all unfinished benchmark "
          "tasks together (the planner-wide cap; "
          "monta_planner_held_bytes{kind=\"rendezvous\"} shows them)");
ABSL_FLAG(int64_t, max_rendezvous_bytes_per_node, int64_t{64} << 20,
          "share of --max_rendezvous_bytes one node (its certificate's "
          "identity; the peer address under --insecure) may hold across all "
          "its tasks, so one node in many tasks cannot starve the others; "
          "between --max_rendezvous_value_bytes and --max_rendezvous_bytes");
ABSL_FLAG(int, grpc_max_threads, 32,
          "threads the gRPC server may use for its synchronous services "
          "(health checking, reflection; grpc::ResourceQuota). The planner's "
          "own services use gRPC's callback API: no thread per call or "
          "stream");
ABSL_FLAG(int64_t, grpc_memory_bytes, int64_t{256} << 20,
          "memory for the gRPC server's connection and stream buffers "
          "(grpc::ResourceQuota); beyond it gRPC refuses new streams");
ABSL_FLAG(std::string, deny_list_file, "",
          "identities refused on every call at once (a compromised node): one "
          "entry per line, node/<name> or <name> (a node) or serial=<hex> (a "
          "certificate, as `openssl x509 -noout -serial` prints it), '#' "
          "comments; re-read every --tls_refresh_seconds (a bad file then "
          "keeps the previous list; at start it stops the planner). Needs "
          "mutual TLS; empty = none");
ABSL_FLAG(std::string, fabric_map_file, "",
          "the operator's fabric map, YAML or JSON: node -> rack -> block, "
          "with optional declared uplink capacity (bits/s) or "
          "oversubscription per rack and block (deploy/README.md); the "
          "authority on where nodes sit. Re-read every "
          "--fabric_refresh_seconds when it changed (a bad file then keeps "
          "the previous map; at start it stops the planner). Empty = none");
ABSL_FLAG(std::string, fabric_node_labels_file, "",
          "a `kubectl get nodes -o json` NodeList (kept fresh by the "
          "read-only sidecar of deploy/): places the nodes the fabric map "
          "does not name by their Kubernetes labels (--fabric_*_label_keys). "
          "Re-read as --fabric_map_file; missing at start = not written yet. "
          "Empty = none");
ABSL_FLAG(double, fabric_refresh_seconds, 10,
          "how often the fabric files are checked for changes (stat, then "
          "read when changed); >= 1, the planner's background loop runs once "
          "a second");
ABSL_FLAG(std::string, fabric_rack_label_keys,
          absl::StrJoin(monta::fabric::DefaultLabelKeys().rack, ","),
          "node label keys naming a node's rack (leaf switch), most preferred "
          "first; read from --fabric_node_labels_file, and from what agents "
          "report of themselves (only a hint)");
ABSL_FLAG(std::string, fabric_block_label_keys,
          absl::StrJoin(monta::fabric::DefaultLabelKeys().block, ","),
          "node label keys naming a node's block (spine group), most "
          "preferred first");
ABSL_FLAG(int, fabric_sample_nodes, 4,
          "nodes of each rack in a level measurement across two racks (all "
          "at once, so that the racks' shared uplink shows; 1..64); the "
          "sample rotates over the rack's idle nodes from round to round");
ABSL_FLAG(int, fabric_max_nodes, 100000,
          "most nodes the fabric map or the node labels file may name");
ABSL_FLAG(int64_t, fabric_node_labels_max_bytes, int64_t{128} << 20,
          "largest --fabric_node_labels_file read (a NodeList carries each "
          "node's whole object)");
ABSL_FLAG(std::string, port_file, "",
          "write the bound ports as JSON "
          "{\"grpc\":N,\"metrics\":M,\"webhook\":W,\"health\":H} to this "
          "file (for tests)");

namespace {

absl::Status TopologyLimitsFromFlags(
    monta::registry::RegistryOptions* options) {
  const int string_bytes = absl::GetFlag(FLAGS_max_topology_string_bytes);
  const int text_bytes = absl::GetFlag(FLAGS_max_topology_text_bytes);
  const int entries = absl::GetFlag(FLAGS_max_topology_entries);
  if (string_bytes < 1 || text_bytes < 1 || entries < 1 || entries > 4096) {
    return absl::InvalidArgumentError(
        "--max_topology_string_bytes and --max_topology_text_bytes must be "
        ">= 1, --max_topology_entries in 1..4096");
  }
  options->topology_limits.max_string_bytes = string_bytes;
  options->topology_limits.max_text_bytes = text_bytes;
  options->topology_limits.max_entries = entries;
  return absl::OkStatus();
}

// The bounds on curves, benchmark tasks and their rendezvous stores.
absl::Status BenchBoundsFromFlags(monta::PlannerOptions* options) {
  monta::coordination::CoordinatorOptions& c = options->coordinator;
  options->registry.max_curves_per_node =
      absl::GetFlag(FLAGS_max_curves_per_node);
  options->registry.max_pending_changes =
      absl::GetFlag(FLAGS_max_pending_registry_changes);
  c.max_curves_per_report = absl::GetFlag(FLAGS_max_curves_per_report);
  c.max_points_per_curve = absl::GetFlag(FLAGS_max_points_per_curve);
  c.max_pending_tasks_per_node =
      absl::GetFlag(FLAGS_max_pending_tasks_per_node);
  c.max_pending_tasks = absl::GetFlag(FLAGS_max_pending_tasks);
  c.max_rendezvous_keys_per_task =
      absl::GetFlag(FLAGS_max_rendezvous_keys_per_task);
  const int64_t value_bytes = absl::GetFlag(FLAGS_max_rendezvous_value_bytes);
  const int64_t task_bytes = absl::GetFlag(FLAGS_max_rendezvous_bytes_per_task);
  const int64_t node_bytes = absl::GetFlag(FLAGS_max_rendezvous_bytes_per_node);
  const int64_t all_bytes = absl::GetFlag(FLAGS_max_rendezvous_bytes);
  if (options->registry.max_curves_per_node < 1 ||
      options->registry.max_pending_changes < 1 ||
      c.max_curves_per_report < 1 || c.max_points_per_curve < 1 ||
      c.max_pending_tasks_per_node < 1 || c.max_pending_tasks < 1 ||
      c.max_rendezvous_keys_per_task < 1 || value_bytes < 1 ||
      task_bytes < value_bytes || node_bytes < value_bytes ||
      all_bytes < node_bytes) {
    return absl::InvalidArgumentError(
        "--max_curves_per_node, --max_pending_registry_changes, "
        "--max_curves_per_report, "
        "--max_points_per_curve, --max_pending_tasks_per_node, "
        "--max_pending_tasks, --max_rendezvous_keys_per_task and "
        "--max_rendezvous_value_bytes must be >= 1, "
        "--max_rendezvous_bytes_per_task and "
        "--max_rendezvous_bytes_per_node >= --max_rendezvous_value_bytes, "
        "--max_rendezvous_bytes >= --max_rendezvous_bytes_per_node");
  }
  c.max_rendezvous_value_bytes = static_cast<size_t>(value_bytes);
  c.max_rendezvous_bytes_per_task = static_cast<size_t>(task_bytes);
  c.max_rendezvous_bytes_per_node = static_cast<size_t>(node_bytes);
  c.max_rendezvous_bytes = static_cast<size_t>(all_bytes);
  return absl::OkStatus();
}

// When the nodes of a benchmark disagree too much for its curve to count,
// and when a verify run's candidate is too noisy to calibrate on.
absl::Status AgreementFromFlags(monta::PlannerOptions* options) {
  const double factor = absl::GetFlag(FLAGS_node_agreement_factor);
  if (!(factor >= 1 && factor <= 1000)) {
    return absl::InvalidArgumentError(
        "--node_agreement_factor: expected 1..1000");
  }
  options->coordinator.node_agreement_factor = factor;
  const double slack = absl::GetFlag(FLAGS_node_agreement_slack_seconds);
  if (!(slack >= 0 && slack <= 1)) {
    return absl::InvalidArgumentError(
        "--node_agreement_slack_seconds: expected 0..1");
  }
  options->coordinator.node_agreement_slack_seconds = slack;
  const double spread = absl::GetFlag(FLAGS_verify_max_spread_ratio);
  if (!(spread >= 0.01 && spread <= 10)) {
    return absl::InvalidArgumentError(
        "--verify_max_spread_ratio: expected 0.01..10");
  }
  options->verifier.max_spread_ratio = spread;
  return absl::OkStatus();
}

// Where nodes sit: the fabric files, their refresh and bounds, the label keys.
absl::Status FabricFromFlags(monta::PlannerOptions* options) {
  monta::fabric::FabricOptions& f = options->fabric;
  f.map_file = absl::GetFlag(FLAGS_fabric_map_file);
  f.node_labels_file = absl::GetFlag(FLAGS_fabric_node_labels_file);
  absl::StatusOr<std::vector<std::string>> rack = monta::fabric::ParseLabelKeys(
      "--fabric_rack_label_keys", absl::GetFlag(FLAGS_fabric_rack_label_keys));
  if (!rack.ok()) return rack.status();
  absl::StatusOr<std::vector<std::string>> block =
      monta::fabric::ParseLabelKeys(
          "--fabric_block_label_keys",
          absl::GetFlag(FLAGS_fabric_block_label_keys));
  if (!block.ok()) return block.status();
  f.label_keys.rack = *std::move(rack);
  f.label_keys.block = *std::move(block);
  const double refresh = absl::GetFlag(FLAGS_fabric_refresh_seconds);
  f.limits.max_nodes = absl::GetFlag(FLAGS_fabric_max_nodes);
  const int64_t labels_bytes =
      absl::GetFlag(FLAGS_fabric_node_labels_max_bytes);
  if (!(refresh >= 1) || f.limits.max_nodes < 1 || labels_bytes < 1) {
    return absl::InvalidArgumentError(
        "--fabric_refresh_seconds, --fabric_max_nodes and "
        "--fabric_node_labels_max_bytes must be >= 1");
  }
  f.limits.max_node_labels_bytes = static_cast<size_t>(labels_bytes);
  options->fabric_refresh = absl::Seconds(refresh);
  options->fabric_sample_nodes = absl::GetFlag(FLAGS_fabric_sample_nodes);
  if (options->fabric_sample_nodes < 1 || options->fabric_sample_nodes > 64) {
    return absl::InvalidArgumentError("--fabric_sample_nodes must be in 1..64");
  }
  return absl::OkStatus();
}

// How long nodes, events and decisions are kept, and ListNodes' page size.
absl::Status RetentionFromFlags(monta::PlannerOptions* options) {
  const double gone_after = absl::GetFlag(FLAGS_gone_after_seconds);
  if (!(gone_after > absl::GetFlag(FLAGS_lease_seconds))) {
    return absl::InvalidArgumentError(
        "--gone_after_seconds must be more than --lease_seconds");
  }
  options->registry.gone_after = absl::Seconds(gone_after);
  options->registry.max_events_per_node =
      absl::GetFlag(FLAGS_max_events_per_node);
  options->registry.max_nodes_per_page =
      absl::GetFlag(FLAGS_max_nodes_per_page);
  if (options->registry.max_events_per_node < 0 ||
      options->registry.max_nodes_per_page < 1) {
    return absl::InvalidArgumentError(
        "--max_events_per_node must be >= 0, --max_nodes_per_page >= 1");
  }
  const double retention = absl::GetFlag(FLAGS_decision_retention_seconds);
  options->max_decisions = absl::GetFlag(FLAGS_max_decisions);
  if (!(retention > 0) || options->max_decisions < 0) {
    return absl::InvalidArgumentError(
        "--decision_retention_seconds must be > 0, --max_decisions >= 0");
  }
  options->decision_retention = absl::Seconds(retention);
  return absl::OkStatus();
}

// The planner's options from the flags; InvalidArgument names a flag that is
// out of range.

// --store and the etcd client's flags.
absl::Status StoreFromFlags(monta::PlannerOptions* options) {
  options->store = absl::GetFlag(FLAGS_store);
  if (options->store == "sqlite") return absl::OkStatus();
  if (options->store != "etcd") {
    return absl::InvalidArgumentError(
        absl::StrCat("--store: expected sqlite or etcd, got \"",
                     absl::CHexEscape(options->store.substr(0, 64)), "\""));
  }
  const std::string endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  if (endpoints.empty()) {
    return absl::InvalidArgumentError(
        "--etcd_endpoints: expected host:port[,host:port...] with "
        "--store=etcd");
  }
  options->etcd.endpoints = absl::StrSplit(endpoints, ',', absl::SkipEmpty());
  options->etcd.security.insecure = absl::GetFlag(FLAGS_etcd_insecure);
  options->etcd.security.ca_file = absl::GetFlag(FLAGS_etcd_ca_file);
  options->etcd.security.cert_file = absl::GetFlag(FLAGS_etcd_cert_file);
  options->etcd.security.key_file = absl::GetFlag(FLAGS_etcd_key_file);
  options->etcd.security.flag_prefix = "--etcd_";
  options->etcd.security.insecure_flag = "--etcd_insecure";
  options->etcd_prefix = absl::GetFlag(FLAGS_etcd_prefix);
  const double lease = absl::GetFlag(FLAGS_leader_lease_seconds);
  if (!(lease >= 1 && lease <= 3600) || lease != static_cast<int>(lease)) {
    return absl::InvalidArgumentError(
        "--leader_lease_seconds: expected whole seconds in 1..3600");
  }
  options->leader_lease = absl::Seconds(lease);
  options->replica_id = absl::GetFlag(FLAGS_replica_id);
  options->advertise_address = absl::GetFlag(FLAGS_advertise_address);
  const double lag = absl::GetFlag(FLAGS_follower_max_lag_seconds);
  if (!(lag >= 0.5 && lag <= 3600)) {
    return absl::InvalidArgumentError(
        "--follower_max_lag_seconds: expected seconds in 0.5..3600");
  }
  options->follower_max_lag = absl::Seconds(lag);
  const double publish = absl::GetFlag(FLAGS_liveness_publish_seconds);
  if (!(publish >= 0.1 && publish <= 60)) {
    return absl::InvalidArgumentError(
        "--liveness_publish_seconds: expected seconds in 0.1..60");
  }
  options->liveness_publish = absl::Seconds(publish);
  const double commit = absl::GetFlag(FLAGS_record_commit_timeout_seconds);
  if (!(commit >= 0.5 && commit <= 60)) {
    return absl::InvalidArgumentError(
        "--record_commit_timeout_seconds: expected seconds in 0.5..60");
  }
  options->record_commit_timeout = absl::Seconds(commit);
  return absl::OkStatus();
}

absl::StatusOr<monta::PlannerOptions> OptionsFromFlags() {
  monta::PlannerOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<monta::GrpcSecurityOptions> security =
      monta::GrpcSecurityFromFlags();
  if (!security.ok()) return security.status();
  options.grpc_security = *std::move(security);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  absl::StatusOr<monta::http::HttpLimits> http_limits =
      monta::http::HttpLimitsFromFlags();
  if (!http_limits.ok()) return http_limits.status();
  options.http_limits = *http_limits;
  const double lease = absl::GetFlag(FLAGS_lease_seconds);
  const double heartbeat = absl::GetFlag(FLAGS_heartbeat_seconds);
  if (lease <= 0 || heartbeat <= 0 || heartbeat >= lease) {
    return absl::InvalidArgumentError(
        "--heartbeat_seconds must be > 0 and < --lease_seconds");
  }
  options.registry.lease = absl::Seconds(lease);
  options.registry.heartbeat_interval = absl::Seconds(heartbeat);
  if (absl::Status s = RetentionFromFlags(&options); !s.ok()) return s;
  if (absl::Status s = TopologyLimitsFromFlags(&options.registry); !s.ok()) {
    return s;
  }
  if (absl::Status s = BenchBoundsFromFlags(&options); !s.ok()) return s;
  if (absl::Status s = AgreementFromFlags(&options); !s.ok()) return s;
  if (absl::Status s = FabricFromFlags(&options); !s.ok()) return s;
  options.grpc_max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  options.grpc_memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes);
  if (options.grpc_max_threads < 4 || options.grpc_memory_bytes < (1 << 20)) {
    return absl::InvalidArgumentError(
        "--grpc_max_threads must be >= 4, --grpc_memory_bytes >= 1048576");
  }
  options.bench_on_register = absl::GetFlag(FLAGS_bench_on_register);
  options.db_path = absl::GetFlag(FLAGS_db);
  options.db_reset_corrupt = absl::GetFlag(FLAGS_db_reset_corrupt);
  if (absl::Status s = StoreFromFlags(&options); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_bench_interval_seconds) < 0) {
    return absl::InvalidArgumentError("--bench_interval_seconds must be >= 0");
  }
  options.bench_interval =
      absl::Seconds(absl::GetFlag(FLAGS_bench_interval_seconds));
  const int cpu_ranks = absl::GetFlag(FLAGS_cpu_ranks_per_node);
  if (cpu_ranks < 1 || cpu_ranks > 64) {
    return absl::InvalidArgumentError("--cpu_ranks_per_node must be in 1..64");
  }
  options.coordinator.default_cpu_ranks_per_node = cpu_ranks;
  options.coordinator.default_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_bench_timeout_seconds));
  options.webhook_address = absl::GetFlag(FLAGS_webhook_listen);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.webhook_client_ca_file = absl::GetFlag(FLAGS_webhook_client_ca_file);
  options.health_address = absl::GetFlag(FLAGS_health_listen);
  options.deny_list_file = absl::GetFlag(FLAGS_deny_list_file);
  if (!options.webhook_address.empty() &&
      (options.tls_cert_file.empty() || options.tls_key_file.empty())) {
    return absl::InvalidArgumentError(
        "--webhook_listen needs --tls_cert and --tls_key");
  }

  return options;
}

// --migrate_from_sqlite: only the store's flags matter; no server starts.
int Migrate() {
  monta::PlannerOptions options;
  if (absl::Status s = StoreFromFlags(&options); !s.ok()) {
    std::cerr << "monta-planner: " << s.message() << "\n";
    return 2;
  }
  if (options.store != "etcd") {
    std::cerr << "monta-planner: --migrate_from_sqlite needs --store=etcd "
                 "(and --etcd_endpoints)\n";
    return 2;
  }
  return monta::MigrateFromSqlite(absl::GetFlag(FLAGS_migrate_from_sqlite),
                                  options.etcd, options.etcd_prefix,
                                  absl::GetFlag(FLAGS_migrate_into_nonempty));
}

}  // namespace

int main(int argc, char** argv) {
  monta::BlockTerminationSignals();
  monta::ParseFlags(
      argc, argv,
      "the cluster's MoE AllToAll strategy planner (gRPC, "
      "Prometheus metrics, optional Kubernetes admission webhook).\n\n"
      "Usage: monta-planner [flags]\n"
      "Example: monta-planner --listen=0.0.0.0:7400 "
      "--metrics-listen=0.0.0.0:7401 --db=/var/lib/monta/planner.db "
      "--tls-ca-file=/etc/monta/tls/ca.crt --tls-cert-file="
      "/etc/monta/tls/tls.crt --tls-key-file=/etc/monta/tls/tls.key",
      __FILE__);
  // Debian's Abseil is built with deadlock detection on, which walks a lock
  // graph on every Mutex acquisition (~2.5% of the planner's CPU under load).
  // The unit tests keep it; the production binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  if (!absl::GetFlag(FLAGS_migrate_from_sqlite).empty()) return Migrate();
  absl::StatusOr<monta::PlannerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "monta-planner: " << options.status().message() << "\n";
    return 2;
  }

  std::cerr << "monta-planner: "
            << monta::DescribeGrpcSecurity(options->grpc_security)
            << (options->grpc_security.insecure
                    ? " Authorization is OFF: every caller may act as any "
                      "node and run benchmarks."
                    : " Each call is authorized against the client "
                      "certificate's identity (spiffe://monta/node/<name>, "
                      "spiffe://monta/operator/<name>, else read-only).")
            << std::endl;
  auto server = monta::PlannerServer::Start(*options);
  if (!server.ok()) {
    std::cerr << "monta-planner: " << server.status().message() << "\n";
    return 1;
  }
  std::cerr << "monta-planner: serving gRPC on port " << (*server)->grpc_port()
            << ", metrics on port " << (*server)->metrics_port();
  if ((*server)->health_port() != 0) {
    std::cerr << ", plaintext health checks on port "
              << (*server)->health_port();
  }
  if ((*server)->webhook_port() != 0) {
    std::cerr << ", admission webhook (HTTPS) on port "
              << (*server)->webhook_port();
  }
  std::cerr << std::endl;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const absl::Status written =
        monta::WritePortFile(port_file, {{"grpc", (*server)->grpc_port()},
                                         {"metrics", (*server)->metrics_port()},
                                         {"webhook", (*server)->webhook_port()},
                                         {"health", (*server)->health_port()}});
    if (!written.ok()) {
      std::cerr << "monta-planner: --port_file: " << written.message() << "\n";
      (*server)->Shutdown(absl::Seconds(5));
      return 1;
    }
  }
  const int sig = monta::WaitForTerminationSignal();
  std::cerr << "monta-planner: signal " << sig << ", shutting down"
            << std::endl;
  (*server)->Shutdown(absl::Seconds(5));
  std::cerr << "monta-planner: stopped" << std::endl;
  return 0;
}
