// Issue 20's Done-when bars for planner replicas on etcd, measured on one box:
// 3 real etcd 3.4 members and 3 monta-planner replicas on --store=etcd (child
// processes on free loopback ports), a swarm of simulated agents (perf/swarm)
// that knows all three replicas, and a client looping GetStrategy over all
// three (the next one on UNAVAILABLE). In order:
//   1. the cold registration storm: every agent registers (the time until all
//      hold a lease);
//   2. the steady state: heartbeat latency, etcd writes per second (the
//      members' etcd_mvcc_put_total + etcd_mvcc_delete_total) and the most
//      the followers exported as monta_store_follower_lag_seconds (their
//      /metrics, read every --lag_scrape_seconds: the lag they know of
//      themselves, a bound that stays below about their 1 s store probe);
//      then follower cache lag polled from outside (a probe node registered
//      on the leader, polled with GetNode on a follower until it shows);
//   3. --rounds rounds, each: SIGSTOP of one etcd member (the next each round)
//      and SIGKILL of the leading replica at the same moment, SIGCONT after
//      --etcd_pause_seconds; the time until another replica coordinates
//      (health monta.v1.Planner SERVING); the killed one restarted; then
//      SIGTERM of the leader and the time until another coordinates; the
//      stopped one restarted;
//   4. with --soak_seconds, the soak (no failover; --rounds=0 skips 3): the
//      agents heartbeat, a client makes --decisions_per_second GetStrategy
//      decisions (each a record in etcd), etcd compacts on its own
//      (--etcd_compaction_mode/--etcd_compaction_retention), and every
//      --soak_sample_seconds each member's database size and size in use,
//      its keys, its compact revision and the alarm list (NOSPACE) are read
//      and printed; then each member defragmented in turn, sizes before and
//      after;
//   5. loss: every node whose registration was acknowledged to the swarm (and
//      every probe) listed by ListNodes on the final leader and on a follower;
//      every decision acknowledged (each GetStrategy call of the bench names
//      its own job; an OK answer) a decision record in etcd (read directly,
//      records.h); every benchmark acknowledged (perf/ha_writes: with
//      --real_agents, that many real monta-agent processes, CPU and Gloo over
//      loopback, register with the replicas, and from just before the rounds
//      until after them a RunBenchmark of them all runs every
//      --benchmark_every_seconds, one at a time; an answer SUCCEEDED; each
//      round's SIGKILL waits until one was acknowledged since the last)
//      answered SUCCEEDED by GetBenchmarkTask, and its curves (ListCurves
//      right after the answer) listed by ListCurves, on the final leader and
//      a follower.
// One table (or --json) prints each number beside its bar. Only the leader
// accepts agents today (followers answer the agent gateway UNAVAILABLE), so
// the whole swarm heartbeats through one replica; the table says so.
//
//   bazel build -c opt //server:monta-planner //perf:ha_bench
//   bazel-bin/perf/ha_bench --agents=20000 --rounds=5   (the size)
//   bazel-bin/perf/ha_bench --agents=20000 --rounds=0 --soak_seconds=1800
//       (the soak)
//   bazel-bin/perf/ha_bench --agents=50 --rounds=1 --leader_lease_seconds=2
//       --steady_seconds=3 --settle_seconds=1 --lag_probes=3   (a smoke run)
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "perf/ha_writes.h"
#include "perf/swarm.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/etcd_store/records.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/grpc_clients.h"
#include "tests/testing/paper_job.h"
#include "tests/testing/process.h"
#include "tests/testing/strategy_loop.h"

ABSL_FLAG(int, agents, 1000,
          "simulated agents (the issue's bar is for 20,000)");
ABSL_FLAG(int, rounds, 5,
          "rounds of leader SIGKILL + etcd member SIGSTOP, "
          "each followed by a leader SIGTERM");
ABSL_FLAG(int, leader_lease_seconds, 10,
          "the replicas' --leader_lease_seconds (the deployment's 10 s)");
ABSL_FLAG(double, etcd_pause_seconds, 3,
          "how long one etcd member is SIGSTOPped each round");
ABSL_FLAG(double, register_rate, 5000,
          "registrations per second of the cold storm (agents start spread "
          "at this rate)");
ABSL_FLAG(double, settle_seconds, 10,
          "unmeasured time after the storm before the steady state");
ABSL_FLAG(double, steady_seconds, 30,
          "the steady-state window (heartbeat latency, etcd writes)");
ABSL_FLAG(int, lag_probes, 10,
          "probe nodes registered on the leader, each polled on a follower");
ABSL_FLAG(double, lag_scrape_seconds, 0.5,
          "how often the steady state reads the followers' "
          "monta_store_follower_lag_seconds from their /metrics");
ABSL_FLAG(int, agents_per_channel, 50,
          "agents sharing one channel (one TCP connection) per replica");
ABSL_FLAG(std::string, planner_binary, "bazel-bin/server/monta-planner",
          "the planner the replicas run");
ABSL_FLAG(int, real_agents, 2,
          "real monta-agent processes (CPU, Gloo over loopback) beside the "
          "swarm, benchmarked together by a RunBenchmark loop across the "
          "rounds; 0: none (the benchmark and curve rows read -1, no bar)");
ABSL_FLAG(std::string, agent_binary, "bazel-bin/agent/monta-agent",
          "the real agents' binary (--real_agents)");
ABSL_FLAG(double, benchmark_every_seconds, 3,
          "how often the benchmark loop starts a RunBenchmark of the real "
          "agents (one at a time: later when one takes longer)");
ABSL_FLAG(int64_t, benchmark_max_bytes, 65536,
          "the benchmark loop's largest size (its smallest is 4096)");
ABSL_FLAG(std::string, planner_args, "",
          "extra flags for every replica, space separated (e.g. "
          "\"--heartbeat_seconds=5 --lease_seconds=15\")");
ABSL_FLAG(std::string, log_dir, "",
          "the replicas' logs; empty: /tmp/ha-bench-<pid> (kept)");
ABSL_FLAG(bool, json, false, "print the report as JSON");
ABSL_FLAG(double, soak_seconds, 0,
          "after the rounds, a soak this long (0: none; the issue's bar is "
          "1800 s at 20,000 agents): the agents heartbeat, a client makes "
          "--decisions_per_second decisions, etcd compacts; each member's "
          "database size, keys and the alarm list are read every "
          "--soak_sample_seconds");
ABSL_FLAG(double, decisions_per_second, 1,
          "the soak's GetStrategy calls per second over the replicas (each "
          "records a decision in etcd)");
ABSL_FLAG(double, soak_sample_seconds, 60,
          "how often the soak reads the etcd members (one line each)");
ABSL_FLAG(bool, soak_defrag, true,
          "after the soak, defragment each etcd member in turn (etcdctl "
          "defrag) and report its database size before and after");
ABSL_FLAG(std::string, etcd_compaction_mode, "periodic",
          "the etcd members' --auto-compaction-mode (periodic, as the ha "
          "overlay, or revision)");
ABSL_FLAG(std::string, etcd_compaction_retention, "5m",
          "the etcd members' --auto-compaction-retention; empty: none. The "
          "ha overlay keeps 1h, which would not compact once in a 30-minute "
          "soak; periodic 5m compacts every 5 minutes, keeping 5 minutes of "
          "history");

namespace monta::perf {
namespace {

using monta::testing::EtcdCluster;
using monta::testing::Process;

constexpr char kLeaderService[] = "monta.v1.Planner";
constexpr char kReadService[] = "monta.v1.Planner.read";
constexpr char kFollowerLagSeries[] = "monta_store_follower_lag_seconds";

// ------------------------------------------------------------- replicas --

struct Replica {
  int index = 0;
  int port = 0;
  int metrics_port = 0;
  std::vector<std::string> argv;
  std::string log_path;
  Process process;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::unique_ptr<monta::v1::Planner::Stub> planner;
  std::unique_ptr<monta::v1::AgentGateway::Stub> gateway;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

// The replicas' key prefix in etcd.
std::string EtcdPrefix() { return absl::StrCat("/ha-bench-", getpid(), "/"); }

std::vector<std::string> ReplicaArgv(int i, int port, int metrics_port,
                                     const EtcdCluster& etcd) {
  std::vector<std::string> argv = {
      // The replica dies with the bench, also when the bench is killed.
      "/usr/bin/setpriv",
      "--pdeathsig",
      "KILL",
      absl::GetFlag(FLAGS_planner_binary),
      absl::StrCat("--listen=127.0.0.1:", port),
      absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port),
      "--store=etcd",
      "--etcd_endpoints=" + absl::StrJoin(etcd.endpoints(), ","),
      "--etcd_insecure",
      "--etcd_prefix=" + EtcdPrefix(),
      absl::StrCat("--leader_lease_seconds=",
                   absl::GetFlag(FLAGS_leader_lease_seconds)),
      absl::StrCat("--replica_id=replica-", i),
  };
  for (std::string& flag :
       SwarmPlannerFlags(absl::GetFlag(FLAGS_planner_args))) {
    argv.push_back(std::move(flag));
  }
  return argv;
}

absl::Status StartProcess(Replica& r) {
  absl::StatusOr<Process> p = Process::Start(r.argv, r.log_path);
  if (!p.ok()) return p.status();
  r.process = *std::move(p);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Replica>>> StartReplicas(
    const EtcdCluster& etcd, const std::string& log_dir) {
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < 3; ++i) {
    auto r = std::make_unique<Replica>();
    r->index = i;
    r->port = monta::testing::FreeLoopbackPort();
    r->metrics_port = monta::testing::FreeLoopbackPort();
    r->argv = ReplicaArgv(i, r->port, r->metrics_port, etcd);
    r->log_path = absl::StrCat(log_dir, "/replica-", i, ".log");
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    auto channel = grpc::CreateCustomChannel(
        r->address(), grpc::InsecureChannelCredentials(), args);
    r->health = grpc::health::v1::Health::NewStub(channel);
    r->planner = monta::v1::Planner::NewStub(channel);
    r->gateway = monta::v1::AgentGateway::NewStub(channel);
    if (absl::Status s = StartProcess(*r); !s.ok()) return s;
    replicas.push_back(std::move(r));
  }
  return replicas;
}

// The replica says `service` is SERVING (one health Check, 500 ms deadline).
bool Serving(Replica& r, const char* service) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Milliseconds(500)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse reply;
  return r.health->Check(&context, request, &reply).ok() &&
         reply.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

// A replica other than `except` that coordinates (its leader health service
// SERVING), polled every 10 ms up to `timeout`; -1 when none did. `tick` runs
// at each poll.
int WaitForLeader(std::vector<std::unique_ptr<Replica>>& replicas, int except,
                  absl::Duration timeout,
                  const std::function<void()>& tick = nullptr) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (tick) tick();
    for (auto& r : replicas) {
      if (r->index != except && r->process.running() &&
          Serving(*r, kLeaderService)) {
        return r->index;
      }
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

// A follower (not `leader`) whose cache is in sync (read health SERVING), up
// to `timeout`; -1 when none.
int WaitForFollower(std::vector<std::unique_ptr<Replica>>& replicas, int leader,
                    absl::Duration timeout) {
  int found = -1;
  monta::testing::WaitFor(
      [&] {
        for (auto& r : replicas) {
          if (r->index != leader && r->process.running() &&
              Serving(*r, kReadService)) {
            found = r->index;
            return true;
          }
        }
        return false;
      },
      timeout);
  return found;
}

// Waits for the replica's exit (up to `timeout`) and starts it again; then
// waits until its cache is in sync (it follows) or it leads.
absl::Status Restart(Replica& r, absl::Duration timeout) {
  if (!r.process.Wait(timeout).ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("replica ", r.index, " did not exit; see ", r.log_path));
  }
  if (absl::Status s = StartProcess(r); !s.ok()) return s;
  if (!monta::testing::WaitFor([&] { return Serving(r, kReadService); },
                               absl::Seconds(60))) {
    return absl::UnavailableError(absl::StrCat(
        "restarted replica ", r.index, " never in sync; see ", r.log_path));
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------------- phases --

// One etcd member read during the soak (-1: not in its /metrics).
struct MemberSample {
  double db_bytes = -1;          // etcd_mvcc_db_total_size_in_bytes
  double db_in_use_bytes = -1;   // etcd_mvcc_db_total_size_in_use_in_bytes
  double keys = -1;              // etcd_debugging_mvcc_keys_total
  double compact_revision = -1;  // etcd_debugging_mvcc_compact_revision
};

struct SoakSample {
  double at_seconds = 0;  // since the soak began
  std::vector<MemberSample> members;
  bool alarms_read = false;
  std::vector<std::string> alarms;  // etcdctl alarm list, one per alarm
  double loadavg_1m = -1;
};

struct SoakReport {
  double seconds = 0;               // as run
  double decisions_per_second = 0;  // asked
  std::vector<SoakSample> samples;
  Stats heartbeats;  // the soak's alone
  int decisions = 0;
  int decisions_failed = 0;
  double decision_p99_ms = 0;
  std::string decision_last_error;
  // Decision records in etcd (every replica's) at the start and the end.
  int64_t decision_records_before = -1;
  int64_t decision_records_after = -1;
  // Per member, around the defragmentation after the soak (-1: not read).
  std::vector<double> defrag_before_bytes;
  std::vector<double> defrag_after_bytes;
  std::vector<double> defrag_seconds;
};

// The acknowledged writes besides registrations (perf/ha_writes), and how many
// the end found missing; -1: not checked (the benchmark ones with
// --real_agents=0).
struct WritesReport {
  int decisions_acknowledged = 0;
  int decisions_recorded = -1;  // job names in etcd's decision records
  int decisions_lost = -1;
  int benchmarks_acknowledged = -1;
  int benchmarks_not_acknowledged = -1;
  // The calls not acknowledged, by outcome, and the last one's error.
  std::map<std::string, int> benchmark_outcomes;
  std::string benchmark_last_error;
  // Acknowledged benchmarks whose curves the answering replica no longer
  // listed (it died right after answering): their curves are not checked.
  int benchmarks_without_curves = 0;
  int64_t curves_acknowledged = -1;
  int results_lost_on_leader = -1;
  int results_lost_on_follower = -1;
  int curves_lost_on_leader = -1;
  int curves_lost_on_follower = -1;
};

struct Report {
  int agents = 0;
  int rounds = 0;
  int lease_ttl_seconds = 0;
  double storm_seconds = -1;
  int registered_after_storm = 0;
  // The swarm's Register answers by code during the storm, and the most any
  // replica held (RSS, threads) while it ran.
  std::map<std::string, int64_t> storm_register_answers;
  int64_t storm_peak_rss_kb = 0;
  int storm_peak_threads = 0;
  Stats steady;
  double etcd_writes_per_second = -1;
  // The bench's own GetStrategy answers in the steady window (each one
  // decision record in etcd), and etcd's writes less them.
  double decisions_per_second = -1;
  double etcd_writes_upkeep_per_second = -1;
  double etcd_txns_per_second = -1;
  double etcd_proposals_per_second = -1;
  // Key writes during the storm: shows the counters count the planner's
  // Txns (at least one node put per agent).
  double etcd_writes_storm = -1;
  std::vector<int32_t> lag_us;  // polled: probe registered, GetNode shows it
  int lag_probes_missing = 0;
  // Exported: the most any follower's /metrics said
  // (monta_store_follower_lag_seconds) during the steady state; how many
  // follower scrapes held the series.
  double lag_exported_max_seconds = -1;
  int lag_exported_samples = 0;
  std::vector<double> failover_seconds;  // -1: no new leader
  std::vector<double> handover_seconds;
  int strategy_calls = 0;
  int strategy_failed = 0;
  int strategy_moves = 0;
  double strategy_p50_ms = 0;
  double strategy_p99_ms = 0;
  std::string strategy_last_error;
  int acknowledged = 0;
  int lost_on_leader = -1;
  int lost_on_follower = -1;
  int64_t target_moves = 0;
  int64_t home_moves = 0;
  SoakReport soak;  // with --soak_seconds
  WritesReport writes;
  std::vector<std::string> errors;
};

// etcd's counters so far, the most any member counts (every member applies
// every write; a paused one lags): key writes (etcd_mvcc_put_total +
// etcd_mvcc_delete_total), Txns and raft proposals committed. All -1 when no
// member's /metrics could be read.
struct EtcdCounters {
  double writes = -1;
  double txns = -1;
  double proposals = -1;
};

// etcd member `member`'s /metrics text (its client port serves them); empty
// when its endpoint names no port.
std::string ScrapeMember(const EtcdCluster& etcd, int member) {
  const std::string endpoint = etcd.endpoint(member);
  int port = 0;
  if (!absl::SimpleAtoi(endpoint.substr(endpoint.rfind(':') + 1), &port)) {
    return "";
  }
  return Scrape(port);
}

EtcdCounters ReadEtcdCounters(const EtcdCluster& etcd) {
  using monta::testing::MetricValue;
  EtcdCounters c;
  for (int i = 0; i < etcd.size(); ++i) {
    const std::string text = ScrapeMember(etcd, i);
    const double puts = MetricValue(text, "etcd_mvcc_put_total");
    const double deletes = MetricValue(text, "etcd_mvcc_delete_total");
    const double txns = MetricValue(text, "etcd_mvcc_txn_total");
    const double proposals =
        MetricValue(text, "etcd_server_proposals_committed_total");
    if (puts < 0 || deletes < 0 || txns < 0 || proposals < 0) continue;
    c.writes = std::max(c.writes, puts + deletes);
    c.txns = std::max(c.txns, txns);
    c.proposals = std::max(c.proposals, proposals);
  }
  return c;
}

// Reads monta_store_follower_lag_seconds from the /metrics of every running
// replica but `leader` (which exports 0); the largest into the report.
void SampleExportedLag(std::vector<std::unique_ptr<Replica>>& replicas,
                       int leader, Report* report) {
  for (auto& r : replicas) {
    if (r->index == leader || !r->process.running()) continue;
    const double lag = monta::testing::MetricValue(Scrape(r->metrics_port),
                                                   kFollowerLagSeries);
    if (lag < 0) continue;
    ++report->lag_exported_samples;
    report->lag_exported_max_seconds =
        std::max(report->lag_exported_max_seconds, lag);
  }
}

// The steady state: heartbeat latency and etcd's writes over the window, and
// the followers' exported lag read every --lag_scrape_seconds during it.
void MeasureSteady(Swarm& swarm, const EtcdCluster& etcd,
                   std::vector<std::unique_ptr<Replica>>& replicas,
                   const std::atomic<int64_t>& decisions, Report* report) {
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_settle_seconds)));
  const int leader = WaitForLeader(replicas, -1, absl::Seconds(30));
  if (leader < 0) report->errors.push_back("steady: no leader");
  const absl::Duration scrape_every =
      absl::Seconds(absl::GetFlag(FLAGS_lag_scrape_seconds));
  const EtcdCounters before = ReadEtcdCounters(etcd);
  const int64_t decisions_before = decisions.load();
  const absl::Time start = absl::Now();
  const absl::Time end =
      start + absl::Seconds(absl::GetFlag(FLAGS_steady_seconds));
  swarm.SetMeasuring(true);
  for (absl::Time now = start; now < end; now = absl::Now()) {
    SampleExportedLag(replicas, leader, report);
    absl::SleepFor(std::min(scrape_every, end - absl::Now()));
  }
  swarm.SetMeasuring(false);
  if (report->lag_exported_samples == 0) {
    report->errors.push_back(absl::StrCat(
        "steady: no follower's /metrics held ", kFollowerLagSeries));
  }
  const EtcdCounters after = ReadEtcdCounters(etcd);
  const int64_t decisions_after = decisions.load();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report->steady = swarm.TakeStats();
  if (before.writes < 0 || after.writes < 0) {
    report->errors.push_back("steady: no etcd member's /metrics readable");
    return;
  }
  report->etcd_writes_per_second = (after.writes - before.writes) / seconds;
  report->decisions_per_second =
      static_cast<double>(decisions_after - decisions_before) / seconds;
  report->etcd_writes_upkeep_per_second = std::max(
      0.0, report->etcd_writes_per_second - report->decisions_per_second);
  report->etcd_txns_per_second = (after.txns - before.txns) / seconds;
  report->etcd_proposals_per_second =
      (after.proposals - before.proposals) / seconds;
}

// Registers node `name` through the leader's agent gateway; true when
// acknowledged.
bool RegisterProbe(Replica& leader, const std::string& name) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Seconds(5)));
  monta::v1::RegisterRequest request;
  request.set_node_name(name);
  request.set_instance_id(absl::StrCat(name, "-", getpid()));
  request.set_agent_version("ha-bench-probe");
  request.set_bench_address("127.0.0.1:19999");
  *request.mutable_topology() = SwarmTopology(name);
  monta::v1::RegisterReply reply;
  return leader.gateway->Register(&context, request, &reply).ok();
}

bool FollowerHas(Replica& follower, const std::string& name) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Seconds(1)));
  monta::v1::GetNodeRequest request;
  request.set_name(name);
  monta::v1::NodeInfo node;
  return follower.planner->GetNode(&context, request, &node).ok();
}

// Follower cache lag: each probe registered on the leader, then GetNode on a
// follower every 2 ms until it shows (up to 10 s); one probe a second.
// Returns the probes' names (acknowledged ones).
std::vector<std::string> MeasureLag(
    std::vector<std::unique_ptr<Replica>>& replicas, Report* report) {
  std::vector<std::string> probes;
  const int leader = WaitForLeader(replicas, -1, absl::Seconds(30));
  const int follower = WaitForFollower(replicas, leader, absl::Seconds(30));
  if (leader < 0 || follower < 0) {
    report->errors.push_back("lag: no leader or no follower in sync");
    return probes;
  }
  for (int p = 0; p < absl::GetFlag(FLAGS_lag_probes); ++p) {
    const std::string name = absl::StrFormat("ha-probe-%03d", p);
    if (!RegisterProbe(*replicas[leader], name)) {
      report->errors.push_back(absl::StrCat("lag: ", name, " not registered"));
      continue;
    }
    const absl::Time acked = absl::Now();
    probes.push_back(name);
    bool shown = false;
    while (!shown && absl::Now() - acked < absl::Seconds(10)) {
      shown = FollowerHas(*replicas[follower], name);
      if (!shown) absl::SleepFor(absl::Milliseconds(2));
    }
    if (shown) {
      report->lag_us.push_back(absl::ToInt64Microseconds(absl::Now() - acked));
    } else {
      ++report->lag_probes_missing;
    }
    absl::SleepFor(absl::Seconds(1));
  }
  return probes;
}

// A StrategyLoop's call: GetStrategy for `job` on replica i (5 s deadline),
// under a job name of its own from `ledger`, which keeps it when answered OK.
// `replicas`, `job` and `ledger` outlive the loop.
std::function<grpc::Status(size_t, monta::v1::StrategyReply*)> AskForStrategy(
    std::vector<std::unique_ptr<Replica>>& replicas,
    const monta::v1::StrategyRequest& job, DecisionLedger* ledger) {
  return [&replicas, &job, ledger](size_t i, monta::v1::StrategyReply* reply) {
    const monta::v1::StrategyRequest request = ledger->Next(job);
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Seconds(5)));
    grpc::Status status =
        replicas[i]->planner->GetStrategy(&context, request, reply);
    if (status.ok()) ledger->Acknowledge(request);
    return status;
  };
}

// Whether etcd member `member` says it leads (etcd_server_is_leader); false
// when its /metrics cannot be read.
bool EtcdLeads(const EtcdCluster& etcd, int member) {
  return monta::testing::MetricValue(ScrapeMember(etcd, member),
                                     "etcd_server_is_leader") == 1;
}

// One round: SIGSTOP etcd member `round % 3` and SIGKILL the leader together
// (once `before_kill` returned), SIGCONT after --etcd_pause_seconds; time to
// another leader; restart. Then SIGTERM the leader; time to another; restart.
absl::Status Round(int round, EtcdCluster& etcd,
                   std::vector<std::unique_ptr<Replica>>& replicas,
                   const std::function<void()>& before_kill, Report* report) {
  const absl::Duration ttl =
      absl::Seconds(absl::GetFlag(FLAGS_leader_lease_seconds));
  const absl::Duration wait = ttl * 3 + absl::Seconds(30);
  const int leader = WaitForLeader(replicas, -1, wait);
  if (leader < 0) return absl::UnavailableError("no leader before the round");
  const int member = round % etcd.size();
  const absl::Duration pause =
      absl::Seconds(absl::GetFlag(FLAGS_etcd_pause_seconds));
  before_kill();
  const bool etcd_leader_paused = EtcdLeads(etcd, member);
  etcd.Pause(member);
  bool paused = true;
  const absl::Time killed = absl::Now();
  replicas[leader]->process.Signal(SIGKILL);
  const auto resume = [&] {
    if (paused && absl::Now() - killed >= pause) {
      etcd.Resume(member);
      paused = false;
    }
  };
  const int next = WaitForLeader(replicas, leader, wait, resume);
  report->failover_seconds.push_back(
      next < 0 ? -1 : absl::ToDoubleSeconds(absl::Now() - killed));
  while (paused) {
    resume();
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (absl::Status s = Restart(*replicas[leader], absl::Seconds(10)); !s.ok())
    return s;
  if (next < 0) return absl::UnavailableError("no leader after the SIGKILL");
  std::cerr << "ha_bench: round " << round << ": SIGKILL of replica " << leader
            << " at "
            << absl::FormatTime("%H:%M:%E3S", killed, absl::UTCTimeZone())
            << " UTC -> replica " << next << " leads after "
            << report->failover_seconds.back() << " s (etcd member " << member
            << " paused " << absl::FormatDuration(pause) << ", "
            << (etcd_leader_paused ? "etcd's leader" : "not etcd's leader")
            << ")\n";
  const absl::Time stopped = absl::Now();
  replicas[next]->process.Signal(SIGTERM);
  const int third = WaitForLeader(replicas, next, wait);
  report->handover_seconds.push_back(
      third < 0 ? -1 : absl::ToDoubleSeconds(absl::Now() - stopped));
  if (absl::Status s = Restart(*replicas[next], absl::Seconds(60)); !s.ok())
    return s;
  if (third < 0) return absl::UnavailableError("no leader after the SIGTERM");
  std::cerr << "ha_bench: round " << round << ": SIGTERM of replica " << next
            << " -> replica " << third << " leads after "
            << report->handover_seconds.back() << " s\n";
  return absl::OkStatus();
}

// Acknowledged names `replica` does not list; -1 when it does not answer.
int Lost(Replica& replica, const std::vector<std::string>& acknowledged) {
  absl::StatusOr<std::vector<monta::v1::NodeInfo>> nodes =
      ListAllNodes(*replica.planner, /*include_gone=*/true);
  if (!nodes.ok()) return -1;
  std::set<std::string> names;
  for (const auto& node : *nodes) names.insert(node.name());
  int lost = 0;
  for (const std::string& name : acknowledged) lost += names.count(name) == 0;
  return lost;
}

// Loss on the final leader and on a follower in sync (polled up to 30 s: its
// cache may trail the leader): registrations, and with `benchmarks` their
// results and curves.
void MeasureLoss(std::vector<std::unique_ptr<Replica>>& replicas,
                 const std::vector<std::string>& acknowledged,
                 const std::vector<AcknowledgedBenchmark>* benchmarks,
                 Report* report) {
  report->acknowledged = acknowledged.size();
  WritesReport& w = report->writes;
  const int leader = WaitForLeader(replicas, -1, absl::Seconds(60));
  if (leader < 0) {
    report->errors.push_back("loss: no leader at the end");
    return;
  }
  report->lost_on_leader = Lost(*replicas[leader], acknowledged);
  if (benchmarks != nullptr) {
    w.results_lost_on_leader =
        LostBenchmarks(*replicas[leader]->planner, *benchmarks);
    w.curves_lost_on_leader =
        LostCurves(*replicas[leader]->planner, *benchmarks);
  }
  const int follower = WaitForFollower(replicas, leader, absl::Seconds(60));
  if (follower < 0) {
    report->errors.push_back("loss: no follower in sync at the end");
    return;
  }
  monta::testing::WaitFor(
      [&] {
        Replica& r = *replicas[follower];
        report->lost_on_follower = Lost(r, acknowledged);
        if (benchmarks == nullptr) return report->lost_on_follower == 0;
        w.results_lost_on_follower = LostBenchmarks(*r.planner, *benchmarks);
        w.curves_lost_on_follower = LostCurves(*r.planner, *benchmarks);
        return report->lost_on_follower == 0 &&
               w.results_lost_on_follower == 0 &&
               w.curves_lost_on_follower == 0;
      },
      absl::Seconds(30));
}

// --real_agents real monta-agent processes, "ha-real-<i>", plaintext as the
// replicas, knowing all of them and dying with the bench (into `agents`);
// then waits (up to 60 s) until the leader lists each alive. Their names.
absl::StatusOr<std::vector<std::string>> StartRealAgents(
    std::vector<std::unique_ptr<Replica>>& replicas, const std::string& log_dir,
    std::vector<Process>* agents) {
  std::vector<int> ports;
  for (auto& r : replicas) ports.push_back(r->port);
  std::vector<std::string> names;
  for (int i = 0; i < absl::GetFlag(FLAGS_real_agents); ++i) {
    const std::string name = absl::StrCat("ha-real-", i);
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--pdeathsig", "KILL"};
    for (std::string& arg : monta::testing::AgentArgv(
             absl::GetFlag(FLAGS_agent_binary),
             monta::testing::LoopbackAddresses(ports), name, {"--insecure"})) {
      argv.push_back(std::move(arg));
    }
    absl::StatusOr<Process> p =
        Process::Start(argv, absl::StrCat(log_dir, "/", name, ".log"));
    if (!p.ok()) return p.status();
    agents->push_back(*std::move(p));
    names.push_back(name);
  }
  const auto alive = [&] {
    const int leader = WaitForLeader(replicas, -1, absl::Seconds(5));
    if (leader < 0) return false;
    for (const std::string& name : names) {
      grpc::ClientContext context;
      context.set_deadline(GrpcDeadline(absl::Seconds(1)));
      monta::v1::GetNodeRequest request;
      request.set_name(name);
      monta::v1::NodeInfo node;
      if (!replicas[leader]->planner->GetNode(&context, request, &node).ok() ||
          node.state() != monta::v1::NODE_STATE_ALIVE) {
        return false;
      }
    }
    return true;
  };
  if (!monta::testing::WaitFor(alive, absl::Seconds(60))) {
    return absl::UnavailableError(absl::StrCat(
        "the real agents are not alive on the leader; logs in ", log_dir));
  }
  return names;
}

// The benchmark loop over `nodes` across the rounds (null without nodes),
// returned once its first result is acknowledged (an error when none is in
// 120 s; the loop goes on).
std::unique_ptr<BenchmarkLoop> StartBenchmarks(
    std::vector<std::unique_ptr<Replica>>& replicas,
    const std::vector<std::string>& nodes, Report* report) {
  if (nodes.empty()) return nullptr;
  BenchmarkLoopOptions options;
  for (auto& r : replicas) {
    options.addresses.push_back(r->address());
    options.planners.push_back(r->planner.get());
  }
  options.nodes = nodes;
  options.max_bytes = absl::GetFlag(FLAGS_benchmark_max_bytes);
  options.every = absl::Seconds(absl::GetFlag(FLAGS_benchmark_every_seconds));
  auto loop = std::make_unique<BenchmarkLoop>(std::move(options));
  if (!loop->WaitForAcknowledged(1, absl::Seconds(120))) {
    report->errors.push_back(
        "benchmarks: none acknowledged in 120 s before the rounds");
  }
  return loop;
}

// Before each round's SIGKILL: waits (up to 60 s) until a benchmark was
// acknowledged since the previous round's, so that each kill comes right
// after an acknowledged result (the one most at risk). Nothing without
// `loop`.
std::function<void()> BenchmarkBeforeKill(BenchmarkLoop* loop) {
  if (loop == nullptr) return [] {};
  auto acknowledged_at_last_kill = std::make_shared<int>(0);
  return [loop, acknowledged_at_last_kill] {
    if (!loop->WaitForAcknowledged(*acknowledged_at_last_kill + 1,
                                   absl::Seconds(60))) {
      std::cerr << "ha_bench: no benchmark acknowledged in 60 s since the "
                   "last round's kill\n";
    }
    *acknowledged_at_last_kill = loop->AcknowledgedSoFar();
  };
}

// The benchmark loop's counts, after Stop.
void NoteBenchmarks(const BenchmarkLoop& loop, WritesReport* w) {
  w->benchmarks_acknowledged = loop.acknowledged().size();
  w->benchmarks_not_acknowledged = loop.NotAcknowledged();
  w->benchmark_outcomes = loop.not_acknowledged();
  w->benchmark_last_error = loop.last_error();
  w->curves_acknowledged = loop.curves_acknowledged();
  for (const AcknowledgedBenchmark& a : loop.acknowledged()) {
    w->benchmarks_without_curves += a.curves.empty();
  }
}

// ------------------------------------------------------------------- soak --

MemberSample ReadMember(const EtcdCluster& etcd, int member) {
  using monta::testing::MetricValue;
  const std::string text = ScrapeMember(etcd, member);
  MemberSample m;
  m.db_bytes = MetricValue(text, "etcd_mvcc_db_total_size_in_bytes");
  m.db_in_use_bytes =
      MetricValue(text, "etcd_mvcc_db_total_size_in_use_in_bytes");
  m.keys = MetricValue(text, "etcd_debugging_mvcc_keys_total");
  m.compact_revision =
      MetricValue(text, "etcd_debugging_mvcc_compact_revision");
  return m;
}

SoakSample SampleEtcd(const EtcdCluster& etcd, absl::Time start,
                      Report* report) {
  SoakSample sample;
  sample.at_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (int i = 0; i < etcd.size(); ++i) {
    sample.members.push_back(ReadMember(etcd, i));
  }
  absl::StatusOr<std::vector<std::string>> alarms = etcd.Alarms();
  sample.alarms_read = alarms.ok();
  if (alarms.ok()) {
    sample.alarms = *std::move(alarms);
  } else {
    report->errors.push_back(absl::StrCat("soak: alarm list at ",
                                          static_cast<int>(sample.at_seconds),
                                          " s: ", alarms.status().message()));
  }
  sample.loadavg_1m = LoadAverage();
  return sample;
}

// Each member's value of `field` in MB, "/"-joined ("-" when unread).
std::string PerMemberMb(const SoakSample& s, double MemberSample::*field) {
  std::vector<std::string> out;
  for (const MemberSample& m : s.members) {
    out.push_back(m.*field < 0 ? "-" : absl::StrFormat("%.1f", m.*field / 1e6));
  }
  return absl::StrJoin(out, "/");
}

// The most any member of any sample said of `field`; -1 when none did.
double SoakMax(const SoakReport& soak, double MemberSample::*field) {
  double most = -1;
  for (const SoakSample& s : soak.samples) {
    for (const MemberSample& m : s.members) most = std::max(most, m.*field);
  }
  return most;
}

std::string SampleLine(const SoakSample& s) {
  double keys = -1;
  double compacted = -1;
  for (const MemberSample& m : s.members) {
    keys = std::max(keys, m.keys);
    compacted = std::max(compacted, m.compact_revision);
  }
  return absl::StrFormat(
      "soak %6.0f s: db %s MB (in use %s), keys %.0f, %s, alarms %s, load "
      "%.2f",
      s.at_seconds, PerMemberMb(s, &MemberSample::db_bytes),
      PerMemberMb(s, &MemberSample::db_in_use_bytes), keys,
      compacted < 0 ? "not compacted yet"
                    : absl::StrFormat("compacted to rev %.0f", compacted),
      !s.alarms_read     ? "unread"
      : s.alarms.empty() ? "none"
                         : absl::StrJoin(s.alarms, "; "),
      s.loadavg_1m);
}

// The heartbeats measured since `before` (the swarm's stats only grow).
Stats HeartbeatsSince(const Stats& before, const Stats& after) {
  Stats since;
  since.heartbeat_us.assign(
      after.heartbeat_us.begin() +
          std::min(before.heartbeat_us.size(), after.heartbeat_us.size()),
      after.heartbeat_us.end());
  since.deadline_misses = after.deadline_misses - before.deadline_misses;
  for (const auto& [what, n] : after.heartbeat_errors) {
    const auto was = before.heartbeat_errors.find(what);
    const int64_t added =
        n - (was == before.heartbeat_errors.end() ? 0 : was->second);
    if (added > 0) since.heartbeat_errors[what] = added;
  }
  return since;
}

// Longer than the replicas' record writers wait between sends (1 s).
constexpr absl::Duration kRecordFlush = absl::Seconds(3);

int64_t CountDecisionRecords(const EtcdCluster& etcd, Report* report) {
  absl::StatusOr<int64_t> n = etcd.CountKeys(
      monta::etcd_store::RecordTablePrefix(EtcdPrefix(), "decisions"));
  if (n.ok()) return *n;
  report->errors.push_back(
      absl::StrCat("soak: counting decisions: ", n.status().message()));
  return -1;
}

// Acknowledged decisions without a decision record in etcd (read once the
// replicas' writers have sent what they hold).
void MeasureDecisionLoss(const EtcdCluster& etcd, const DecisionLedger& ledger,
                         Report* report) {
  WritesReport& w = report->writes;
  const std::vector<std::string> acknowledged = ledger.Acknowledged();
  w.decisions_acknowledged = acknowledged.size();
  absl::SleepFor(kRecordFlush);
  absl::StatusOr<std::set<std::string>> recorded =
      RecordedDecisionJobs(etcd.endpoints(), EtcdPrefix());
  if (!recorded.ok()) {
    report->errors.push_back(
        absl::StrCat("loss: decision records: ", recorded.status().message()));
    return;
  }
  w.decisions_recorded = recorded->size();
  w.decisions_lost = CountMissing(acknowledged, *recorded);
}

// After the soak: each member defragmented in turn (one at a time keeps the
// quorum), its database size before and after.
void Defragment(const EtcdCluster& etcd, Report* report) {
  SoakReport& soak = report->soak;
  for (int i = 0; i < etcd.size(); ++i) {
    soak.defrag_before_bytes.push_back(ReadMember(etcd, i).db_bytes);
    const absl::Time start = absl::Now();
    if (absl::Status s = etcd.Defragment(i); !s.ok()) {
      report->errors.push_back(absl::StrCat("soak: ", s.message()));
    }
    soak.defrag_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    soak.defrag_after_bytes.push_back(ReadMember(etcd, i).db_bytes);
    std::cerr << absl::StrFormat(
        "ha_bench: etcd member %d defragmented in %.2f s: %.1f -> %.1f MB\n", i,
        soak.defrag_seconds.back(), soak.defrag_before_bytes.back() / 1e6,
        soak.defrag_after_bytes.back() / 1e6);
  }
}

// The soak: the swarm heartbeats (measured), a client makes
// --decisions_per_second GetStrategy calls over the replicas, no failover;
// the etcd members read every --soak_sample_seconds. Then the
// defragmentation (--soak_defrag).
void Soak(Swarm& swarm, const EtcdCluster& etcd,
          std::vector<std::unique_ptr<Replica>>& replicas,
          DecisionLedger* ledger, Report* report) {
  SoakReport& soak = report->soak;
  soak.decisions_per_second = absl::GetFlag(FLAGS_decisions_per_second);
  const absl::Duration every =
      absl::Seconds(absl::GetFlag(FLAGS_soak_sample_seconds));
  // The replicas send their records every second: the earlier phases' last
  // ones land before the count.
  absl::SleepFor(kRecordFlush);
  soak.decision_records_before = CountDecisionRecords(etcd, report);
  const Stats before = swarm.TakeStats();
  const monta::v1::StrategyRequest job = monta::testing::PaperJobRequest();
  const absl::Time start = absl::Now();
  const absl::Time end =
      start + absl::Seconds(absl::GetFlag(FLAGS_soak_seconds));
  swarm.SetMeasuring(true);
  monta::testing::StrategyLoop decisions(
      AskForStrategy(replicas, job, ledger), replicas.size(),
      absl::Seconds(1) / soak.decisions_per_second,
      monta::testing::StrategyLoop::Pace::kStartEvery);
  for (absl::Time next = start + every; absl::Now() < end; next += every) {
    absl::SleepFor(std::min(next, end) - absl::Now());
    soak.samples.push_back(SampleEtcd(etcd, start, report));
    std::cerr << "ha_bench: " << SampleLine(soak.samples.back()) << "\n";
  }
  decisions.Stop();
  swarm.SetMeasuring(false);
  soak.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  soak.heartbeats = HeartbeatsSince(before, swarm.TakeStats());
  soak.decisions = decisions.calls();
  soak.decisions_failed = decisions.failed();
  soak.decision_p99_ms = decisions.QuantileSeconds(0.99) * 1e3;
  soak.decision_last_error = decisions.last_error();
  absl::SleepFor(kRecordFlush);
  soak.decision_records_after = CountDecisionRecords(etcd, report);
  if (absl::GetFlag(FLAGS_soak_defrag)) Defragment(etcd, report);
}

// ----------------------------------------------------------------- report --

struct Row {
  std::string name;
  double value;
  std::string bar;
  int pass;  // 1 yes, 0 no, -1 no bar (information)
};

double Max(const std::vector<double>& v) {
  double m = v.empty() ? -1 : v[0];
  for (double x : v) m = (x < 0 || m < 0) ? -1 : std::max(m, x);
  return m;
}

// The more of two replicas' counts; -1 when either was not read.
double MoreLost(int a, int b) { return a < 0 || b < 0 ? -1 : std::max(a, b); }

// The acknowledged writes besides registrations: counts, and the loss bars
// (the benchmark ones without a bar with --real_agents=0).
std::vector<Row> WritesRows(const WritesReport& w) {
  const double results_lost =
      MoreLost(w.results_lost_on_leader, w.results_lost_on_follower);
  const double curves_lost =
      MoreLost(w.curves_lost_on_leader, w.curves_lost_on_follower);
  const bool benchmarked = w.benchmarks_acknowledged >= 0;
  return {
      {"decisions_acknowledged", static_cast<double>(w.decisions_acknowledged),
       "", -1},
      {"decisions_lost", static_cast<double>(w.decisions_lost), "0",
       w.decisions_acknowledged > 0 && w.decisions_lost == 0},
      {"benchmarks_acknowledged",
       static_cast<double>(w.benchmarks_acknowledged), "", -1},
      {"benchmarks_not_acknowledged",
       static_cast<double>(w.benchmarks_not_acknowledged), "", -1},
      {"benchmark_results_lost", results_lost, "0",
       !benchmarked ? -1 : w.benchmarks_acknowledged > 0 && results_lost == 0},
      {"curves_acknowledged", static_cast<double>(w.curves_acknowledged), "",
       -1},
      {"curves_lost", curves_lost, "0",
       !benchmarked ? -1 : w.curves_acknowledged > 0 && curves_lost == 0},
  };
}

// One row per bar, in the order of the Done-when list.
std::vector<Row> Rows(Report& r) {
  const double ttl = r.lease_ttl_seconds;
  const double failover = Max(r.failover_seconds);
  const double handover = Max(r.handover_seconds);
  const double hb_p50 = Percentile(r.steady.heartbeat_us, 0.50);
  const double hb_p99 = Percentile(r.steady.heartbeat_us, 0.99);
  const double lag_p50 = Percentile(r.lag_us, 0.50);
  const double lag_p99 = Percentile(r.lag_us, 0.99);
  int64_t hb_errors = r.steady.deadline_misses;
  for (const auto& [what, n] : r.steady.heartbeat_errors) hb_errors += n;
  const auto within = [](double v, double bar) { return v >= 0 && v <= bar; };
  std::vector<Row> rows = {
      {"failover_sigkill_max_s", failover,
       absl::StrFormat("<= TTL + 3 = %g s", ttl + 3),
       r.rounds == 0 ? -1 : within(failover, ttl + 3)},
      {"handover_sigterm_max_s", handover, "<= 2 s",
       r.rounds == 0 ? -1 : within(handover, 2)},
      {"strategy_calls", static_cast<double>(r.strategy_calls), "", -1},
      {"strategy_failed_calls", static_cast<double>(r.strategy_failed), "0",
       r.strategy_calls > 0 && r.strategy_failed == 0},
      {"strategy_p99_ms", r.strategy_p99_ms, "<= 500 ms",
       r.strategy_calls > 0 && r.strategy_p99_ms <= 500},
      {"registrations_acknowledged", static_cast<double>(r.acknowledged), "",
       -1},
      {"lost_on_leader", static_cast<double>(r.lost_on_leader), "0",
       r.lost_on_leader == 0},
      {"lost_on_follower", static_cast<double>(r.lost_on_follower), "0",
       r.lost_on_follower == 0},
      {"registration_storm_s", r.storm_seconds, "<= 60 s (for 20,000)",
       r.registered_after_storm == r.agents && within(r.storm_seconds, 60)},
      {"heartbeat_p50_ms", hb_p50, "", -1},
      {"heartbeat_p99_ms", hb_p99, "<= 100 ms",
       !r.steady.heartbeat_us.empty() && hb_p99 <= 100},
      {"heartbeat_errors_steady", static_cast<double>(hb_errors), "", -1},
      {"etcd_writes_per_s", r.etcd_writes_per_second, "", -1},
      {"strategy_decisions_per_s", r.decisions_per_second, "", -1},
      {"etcd_writes_upkeep_per_s", r.etcd_writes_upkeep_per_second, "< 50/s",
       r.etcd_writes_upkeep_per_second >= 0 &&
           r.etcd_writes_upkeep_per_second < 50},
      {"etcd_txns_per_s", r.etcd_txns_per_second, "", -1},
      {"etcd_proposals_per_s", r.etcd_proposals_per_second, "", -1},
      {"etcd_writes_during_storm", r.etcd_writes_storm, "", -1},
      {"follower_lag_p50_ms", lag_p50, "", -1},
      {"follower_lag_p99_ms", lag_p99, "<= 1000 ms",
       !r.lag_us.empty() && r.lag_probes_missing == 0 && lag_p99 <= 1000},
      {"follower_lag_exported_max_ms",
       r.lag_exported_max_seconds < 0 ? -1 : r.lag_exported_max_seconds * 1e3,
       "", -1},
  };
  // After the registrations' loss, the other acknowledged writes'.
  const auto at = std::find_if(rows.begin(), rows.end(), [](const Row& row) {
    return row.name == "lost_on_follower";
  });
  const std::vector<Row> writes = WritesRows(r.writes);
  rows.insert(at + 1, writes.begin(), writes.end());
  return rows;
}

nlohmann::json ToJson(Report& r, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["agents"] = r.agents;
  j["rounds"] = r.rounds;
  j["leader_lease_seconds"] = r.lease_ttl_seconds;
  // Which replicas took the steady state's heartbeats: every replica (each
  // agent heartbeats to its home replica, a hash of its name; the replica
  // owns its liveness, server/etcd_store/attachments.h).
  std::vector<int64_t> by_replica(3, 0);
  for (const auto& [target, n] : r.steady.heartbeats_by_target) {
    if (target >= 0 && target < 3) by_replica[target] = n;
  }
  const int accepting = static_cast<int>(std::count_if(
      by_replica.begin(), by_replica.end(), [](int64_t n) { return n > 0; }));
  j["steady_heartbeats_by_replica"] = by_replica;
  j["agents_accepted_by"] =
      accepting == 1 ? "one replica" : absl::StrCat(accepting, " replicas");
  j["failover_seconds"] = r.failover_seconds;
  j["handover_seconds"] = r.handover_seconds;
  j["strategy_moves"] = r.strategy_moves;
  j["strategy_p50_ms"] = r.strategy_p50_ms;
  j["swarm_target_moves"] = r.target_moves;
  j["swarm_home_moves"] = r.home_moves;
  j["registered_after_storm"] = r.registered_after_storm;
  j["storm_register_answers"] = r.storm_register_answers;
  j["storm_peak_rss_mib"] = r.storm_peak_rss_kb / 1024;
  j["storm_peak_threads"] = r.storm_peak_threads;
  j["lag_probes_missing"] = r.lag_probes_missing;
  j["lag_exported_samples"] = r.lag_exported_samples;
  j["follower_lag_sources"] =
      "follower_lag_p50/p99_ms: polled, a probe node registered on the "
      "leader until GetNode on a follower shows it; "
      "follower_lag_exported_max_ms: the most the followers' own "
      "monta_store_follower_lag_seconds (/metrics) said in the steady state, "
      "a bound (every older commit is applied) that stays below about their "
      "1 s store probe";
  j["loss_covers"] =
      "node registrations (swarm agents and lag probes): ListNodes on the "
      "final leader and a follower; decisions (each GetStrategy call of the "
      "bench names its own job): etcd's decision records, read directly; "
      "benchmark results (RunBenchmark answered SUCCEEDED) and their curves "
      "(ListCurves right after the answer): GetBenchmarkTask and ListCurves "
      "on the final leader and a follower (a curve is held by one of the same "
      "measurement from its task or with a higher sequence); the _lost rows "
      "count the more of the two replicas";
  const WritesReport& w = r.writes;
  j["writes"] = {
      {"decisions_recorded", w.decisions_recorded},
      {"benchmarks_not_acknowledged_by_outcome", w.benchmark_outcomes},
      {"benchmark_last_error", w.benchmark_last_error},
      {"benchmarks_without_curves", w.benchmarks_without_curves},
      {"results_lost_on_leader", w.results_lost_on_leader},
      {"results_lost_on_follower", w.results_lost_on_follower},
      {"curves_lost_on_leader", w.curves_lost_on_leader},
      {"curves_lost_on_follower", w.curves_lost_on_follower},
  };
  j["loadavg_1m"] = LoadAverage();
  if (!r.strategy_last_error.empty()) {
    j["strategy_last_error"] = r.strategy_last_error;
  }
  j["errors"] = r.errors;
  nlohmann::json table = nlohmann::json::array();
  for (const Row& row : rows) {
    table.push_back({{"name", row.name},
                     {"value", row.value},
                     {"bar", row.bar},
                     {"pass", row.pass < 0 ? nlohmann::json()
                                           : nlohmann::json(row.pass == 1)}});
  }
  j["rows"] = table;
  return j;
}

void PrintTable(const nlohmann::json& j) {
  std::cout << absl::StrFormat(
      "ha_bench: %d agents, %d rounds, leader lease %d s, load %.2f\n"
      "agents are accepted by %s; steady heartbeats per replica: %s\n",
      j["agents"].get<int>(), j["rounds"].get<int>(),
      j["leader_lease_seconds"].get<int>(), j["loadavg_1m"].get<double>(),
      j["agents_accepted_by"].get<std::string>(),
      j["steady_heartbeats_by_replica"].dump());
  std::cout << absl::StrFormat("%-28s %14s  %-22s %s\n", "metric", "value",
                               "bar", "pass");
  for (const auto& row : j["rows"]) {
    const std::string pass = row["pass"].is_null()     ? "-"
                             : row["pass"].get<bool>() ? "yes"
                                                       : "NO";
    std::cout << absl::StrFormat(
        "%-28s %14.3f  %-22s %s\n", row["name"].get<std::string>(),
        row["value"].get<double>(), row["bar"].get<std::string>(), pass);
  }
  std::cout << absl::StrFormat(
      "storm: Register answers %s; replicas' peak RSS %d MiB, threads %d\n",
      j["storm_register_answers"].dump(), j["storm_peak_rss_mib"].get<int>(),
      j["storm_peak_threads"].get<int>());
  std::cout << j["follower_lag_sources"].get<std::string>() << "\n";
  std::cout << "benchmarks not acknowledged, by outcome: "
            << j["writes"]["benchmarks_not_acknowledged_by_outcome"].dump()
            << "; the last: "
            << j["writes"]["benchmark_last_error"].get<std::string>() << "\n";
  for (const auto& e : j["errors"]) {
    std::cout << "error: " << e.get<std::string>() << "\n";
  }
}

// The soak's rows (none without a soak).
void AppendSoakRows(SoakReport& soak, std::vector<Row>* rows) {
  if (soak.samples.empty()) return;
  const double db_max = SoakMax(soak, &MemberSample::db_bytes);
  const double in_use_max = SoakMax(soak, &MemberSample::db_in_use_bytes);
  const double compacted = SoakMax(soak, &MemberSample::compact_revision);
  int alarm_reads = 0;
  int alarm_samples = 0;
  for (const SoakSample& s : soak.samples) {
    alarm_reads += s.alarms_read;
    alarm_samples += !s.alarms.empty();
  }
  const double hb_p99 = Percentile(soak.heartbeats.heartbeat_us, 0.99);
  int64_t hb_errors = soak.heartbeats.deadline_misses;
  for (const auto& [what, n] : soak.heartbeats.heartbeat_errors) {
    hb_errors += n;
  }
  const auto mb = [](double bytes) { return bytes < 0 ? -1 : bytes / 1e6; };
  const double records =
      soak.decision_records_before < 0 || soak.decision_records_after < 0
          ? -1
          : soak.decision_records_after - soak.decision_records_before;
  const std::vector<Row> soak_rows = {
      {"soak_seconds", soak.seconds, "", -1},
      {"soak_etcd_db_max_mb", mb(db_max), "< 500 MB",
       db_max >= 0 && db_max < 500e6},
      {"soak_etcd_db_in_use_max_mb", mb(in_use_max), "", -1},
      {"soak_etcd_keys_max", SoakMax(soak, &MemberSample::keys), "", -1},
      {"soak_etcd_compact_revision", compacted, "> 0 (compaction on)",
       compacted > 0},
      {"soak_etcd_alarm_samples", static_cast<double>(alarm_samples),
       "0 (no NOSPACE)", alarm_reads > 0 && alarm_samples == 0},
      {"soak_heartbeat_p99_ms", hb_p99, "<= 100 ms",
       !soak.heartbeats.heartbeat_us.empty() && hb_p99 <= 100},
      {"soak_heartbeat_errors", static_cast<double>(hb_errors), "", -1},
      {"soak_decisions_made",
       static_cast<double>(soak.decisions - soak.decisions_failed), "", -1},
      {"soak_decisions_failed", static_cast<double>(soak.decisions_failed), "0",
       soak.decisions > 0 && soak.decisions_failed == 0},
      {"soak_decision_p99_ms", soak.decision_p99_ms, "", -1},
      {"soak_decision_records_added", records, "", -1},
      {"soak_defrag_before_max_mb", mb(Max(soak.defrag_before_bytes)), "", -1},
      {"soak_defrag_after_max_mb", mb(Max(soak.defrag_after_bytes)), "", -1},
  };
  rows->insert(rows->end(), soak_rows.begin(), soak_rows.end());
}

nlohmann::json SoakJson(const SoakReport& soak) {
  nlohmann::json samples = nlohmann::json::array();
  for (const SoakSample& s : soak.samples) {
    nlohmann::json sample = {{"at_seconds", s.at_seconds},
                             {"loadavg_1m", s.loadavg_1m}};
    for (const MemberSample& m : s.members) {
      sample["db_bytes"].push_back(m.db_bytes);
      sample["db_in_use_bytes"].push_back(m.db_in_use_bytes);
      sample["keys"].push_back(m.keys);
      sample["compact_revision"].push_back(m.compact_revision);
    }
    sample["alarms"] =
        s.alarms_read ? nlohmann::json(s.alarms) : nlohmann::json();
    samples.push_back(std::move(sample));
  }
  return {
      {"seconds", soak.seconds},
      {"decisions_per_second", soak.decisions_per_second},
      {"etcd_auto_compaction",
       absl::StrCat(
           "--auto-compaction-mode=", absl::GetFlag(FLAGS_etcd_compaction_mode),
           " --auto-compaction-retention=",
           absl::GetFlag(FLAGS_etcd_compaction_retention))},
      {"samples", samples},
      {"decision_records_before", soak.decision_records_before},
      {"decision_records_after", soak.decision_records_after},
      {"decision_last_error", soak.decision_last_error},
      {"defrag_before_bytes", soak.defrag_before_bytes},
      {"defrag_after_bytes", soak.defrag_after_bytes},
      {"defrag_seconds", soak.defrag_seconds},
  };
}

// The soak's time series, at most 12 lines (evenly spread, the last one
// always).
void PrintSoak(const SoakReport& soak) {
  if (soak.samples.empty()) return;
  std::cout << absl::StrFormat(
      "soak: %.0f s, %g decisions/s, etcd --auto-compaction-mode=%s "
      "--auto-compaction-retention=%s\n",
      soak.seconds, soak.decisions_per_second,
      absl::GetFlag(FLAGS_etcd_compaction_mode),
      absl::GetFlag(FLAGS_etcd_compaction_retention));
  const size_t n = soak.samples.size();
  const size_t step = (n + 11) / 12;
  for (size_t i = 0; i < n; ++i) {
    if (i % step == 0 || i + 1 == n) {
      std::cout << SampleLine(soak.samples[i]) << "\n";
    }
  }
}

// ------------------------------------------------------------------- main --

// The storm: every agent registers; its duration, etcd's key writes, the
// Register answers and the replicas' peak RSS and threads.
void Storm(Swarm& swarm, const EtcdCluster& etcd,
           std::vector<std::unique_ptr<Replica>>& replicas, Report* report) {
  const EtcdCounters before = ReadEtcdCounters(etcd);
  const absl::Time start = absl::Now();
  swarm.Start(absl::GetFlag(FLAGS_register_rate), 0);
  for (int tick = 0; swarm.Registered() < report->agents &&
                     absl::Now() - start < absl::Minutes(5);
       ++tick) {
    if (tick % 25 == 0) {  // every 0.5 s
      for (auto& r : replicas) {
        const ProcSample p = ReadProc(r->process.pid());
        report->storm_peak_rss_kb =
            std::max(report->storm_peak_rss_kb, p.rss_kb);
        report->storm_peak_threads =
            std::max(report->storm_peak_threads, p.threads);
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  report->registered_after_storm = swarm.Registered();
  report->storm_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report->storm_register_answers = swarm.TakeStats().register_answers;
  const EtcdCounters after = ReadEtcdCounters(etcd);
  if (before.writes >= 0 && after.writes >= 0) {
    report->etcd_writes_storm = after.writes - before.writes;
  }
  std::cerr << "ha_bench: " << report->registered_after_storm << " of "
            << report->agents << " registered in " << report->storm_seconds
            << " s; Register answers "
            << nlohmann::json(report->storm_register_answers).dump()
            << "; replicas' peak RSS " << report->storm_peak_rss_kb / 1024
            << " MiB, threads " << report->storm_peak_threads << "\n";
}

// The swarm and the strategy client over the replicas, through every phase;
// the benchmark loop on `real_nodes` across the rounds.
void RunPhases(EtcdCluster& etcd,
               std::vector<std::unique_ptr<Replica>>& replicas,
               const std::vector<std::string>& real_nodes, Report* report) {
  SwarmOptions options;
  for (auto& r : replicas) options.targets.push_back(r->address());
  options.agents = report->agents;
  options.agents_per_channel = absl::GetFlag(FLAGS_agents_per_channel);
  Swarm swarm(std::move(options));
  Storm(swarm, etcd, replicas, report);
  const monta::v1::StrategyRequest job = monta::testing::PaperJobRequest();
  // Each answer is one decision record in etcd: the steady state's writes
  // are told with and without them.
  std::atomic<int64_t> decisions{0};
  DecisionLedger ledger(absl::StrCat("ha-bench-", getpid()));
  auto ask = AskForStrategy(replicas, job, &ledger);
  monta::testing::StrategyLoop reader(
      [&ask, &decisions](size_t i, monta::v1::StrategyReply* reply) {
        grpc::Status status = ask(i, reply);
        if (status.ok()) ++decisions;
        return status;
      },
      replicas.size());
  MeasureSteady(swarm, etcd, replicas, decisions, report);
  std::vector<std::string> probes = MeasureLag(replicas, report);
  std::unique_ptr<BenchmarkLoop> benchmarks =
      StartBenchmarks(replicas, real_nodes, report);
  const auto before_kill = BenchmarkBeforeKill(benchmarks.get());
  for (int round = 0; round < report->rounds; ++round) {
    if (absl::Status s = Round(round, etcd, replicas, before_kill, report);
        !s.ok()) {
      report->errors.push_back(
          absl::StrCat("round ", round, ": ", s.message()));
      break;
    }
  }
  reader.Stop();
  report->strategy_calls = reader.calls();
  report->strategy_failed = reader.failed();
  report->strategy_moves = reader.moved();
  report->strategy_p50_ms = reader.QuantileSeconds(0.50) * 1e3;
  report->strategy_p99_ms = reader.QuantileSeconds(0.99) * 1e3;
  report->strategy_last_error = reader.last_error();
  if (benchmarks != nullptr) {
    benchmarks->Stop();
    NoteBenchmarks(*benchmarks, &report->writes);
  }
  if (absl::GetFlag(FLAGS_soak_seconds) > 0) {
    Soak(swarm, etcd, replicas, &ledger, report);
  }
  std::vector<std::string> acknowledged = swarm.Acknowledged();
  acknowledged.insert(acknowledged.end(), probes.begin(), probes.end());
  MeasureLoss(replicas, acknowledged,
              benchmarks != nullptr ? &benchmarks->acknowledged() : nullptr,
              report);
  MeasureDecisionLoss(etcd, ledger, report);
  const Stats stats = swarm.TakeStats();
  report->target_moves = stats.target_moves;
  report->home_moves = stats.home_moves;
  swarm.Stop();
}

absl::Status CheckSoakAndBenchmarkFlags() {
  if (absl::GetFlag(FLAGS_real_agents) < 0 ||
      !(absl::GetFlag(FLAGS_benchmark_every_seconds) > 0) ||
      absl::GetFlag(FLAGS_benchmark_max_bytes) < 4096) {
    return absl::InvalidArgumentError(
        "--real_agents must be >= 0, --benchmark_every_seconds > 0, "
        "--benchmark_max_bytes >= 4096 (the benchmark loop's smallest size)");
  }
  if (!(absl::GetFlag(FLAGS_soak_seconds) >= 0) ||
      !(absl::GetFlag(FLAGS_decisions_per_second) > 0) ||
      !(absl::GetFlag(FLAGS_soak_sample_seconds) > 0)) {
    return absl::InvalidArgumentError(
        "--soak_seconds must be >= 0, --decisions_per_second and "
        "--soak_sample_seconds > 0");
  }
  const std::string mode = absl::GetFlag(FLAGS_etcd_compaction_mode);
  if (mode != "periodic" && mode != "revision") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd_compaction_mode=", mode, ": expected periodic or revision"));
  }
  return absl::OkStatus();
}

int Main() {
  Report report;
  report.agents = absl::GetFlag(FLAGS_agents);
  report.rounds = absl::GetFlag(FLAGS_rounds);
  report.lease_ttl_seconds = absl::GetFlag(FLAGS_leader_lease_seconds);
  if (report.agents < 1 || report.rounds < 0 || report.lease_ttl_seconds < 1 ||
      absl::GetFlag(FLAGS_register_rate) <= 0 ||
      absl::GetFlag(FLAGS_agents_per_channel) < 1 ||
      !(absl::GetFlag(FLAGS_lag_scrape_seconds) > 0)) {
    std::cerr << "ha_bench: --agents, --leader_lease_seconds, --register_rate, "
                 "--agents_per_channel and --lag_scrape_seconds must be > 0, "
                 "--rounds >= 0\n";
    return 2;
  }
  if (absl::Status s = CheckSoakAndBenchmarkFlags(); !s.ok()) {
    std::cerr << "ha_bench: " << s.message() << "\n";
    return 2;
  }
  std::string log_dir = absl::GetFlag(FLAGS_log_dir);
  if (log_dir.empty()) log_dir = absl::StrCat("/tmp/ha-bench-", getpid());
  monta::testing::Run({"/bin/mkdir", "-p", log_dir});
  if (absl::Status s = EtcdCluster::Available(); !s.ok()) {
    std::cerr << "ha_bench: " << s << "\n";
    return 1;
  }
  EtcdCluster::Options etcd_options;
  etcd_options.members = 3;
  etcd_options.auto_compaction_mode = absl::GetFlag(FLAGS_etcd_compaction_mode);
  etcd_options.auto_compaction_retention =
      absl::GetFlag(FLAGS_etcd_compaction_retention);
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start(std::move(etcd_options));
  if (!etcd.ok()) {
    std::cerr << "ha_bench: etcd: " << etcd.status() << "\n";
    return 1;
  }
  auto replicas = StartReplicas(**etcd, log_dir);
  if (!replicas.ok()) {
    std::cerr << "ha_bench: replicas: " << replicas.status() << "\n";
    return 1;
  }
  if (WaitForLeader(*replicas, -1, absl::Seconds(60)) < 0) {
    std::cerr << "ha_bench: no replica leads; logs in " << log_dir << "\n";
    return 1;
  }
  std::vector<Process> agents;
  absl::StatusOr<std::vector<std::string>> real_nodes =
      StartRealAgents(*replicas, log_dir, &agents);
  if (!real_nodes.ok()) {
    std::cerr << "ha_bench: " << real_nodes.status() << "\n";
    return 1;
  }
  std::cerr << "ha_bench: 3 etcd members, 3 replicas, " << agents.size()
            << " real agents, logs in " << log_dir << "\n";
  RunPhases(**etcd, *replicas, *real_nodes, &report);
  for (auto& r : *replicas) {
    r->process.Signal(SIGKILL);
    r->process.Wait(absl::Seconds(10)).IgnoreError();
  }
  for (Process& agent : agents) {
    agent.Signal(SIGKILL);
    agent.Wait(absl::Seconds(10)).IgnoreError();
  }
  std::vector<Row> rows = Rows(report);
  AppendSoakRows(report.soak, &rows);
  nlohmann::json j = ToJson(report, rows);
  if (!report.soak.samples.empty()) j["soak"] = SoakJson(report.soak);
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << j.dump(2) << std::endl;
  } else {
    PrintTable(j);
    PrintSoak(report.soak);
  }
  return report.errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace monta::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "3 etcd members, 3 planner replicas on --store=etcd, a swarm of "
      "simulated agents and a GetStrategy client; leader kills, etcd member "
      "pauses, graceful stops; one table of issue 20's bars. See the file's "
      "header.");
  absl::ParseCommandLine(argc, argv);
  // One Mutex per agent: Debian's Abseil would walk its deadlock graph on
  // every acquisition (as swarm_bench).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  signal(SIGPIPE, SIG_IGN);
  return monta::perf::Main();
}
