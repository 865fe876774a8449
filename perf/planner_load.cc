// Closed-loop load on the planner: GetStrategy against the emptiest RPC the
// same server answers (gRPC health Check), so that the model's share of a
// decision's cost shows next to the RPC stack's.
//
//   bazel run -c opt //perf:planner_load -- --clients=4 --seconds=5 [--json]
//   bazel run -c opt //perf:planner_load -- --planner=127.0.0.1:7400 --job=FILE
//
// Phases (--phases, default ABA), each --seconds long, every client thread
// issuing one call at a time on its own channel (its own TCP connection):
// A = health Check, B = GetStrategy (the MoNTA paper's job by default:
// a800-hgx profile, 2 nodes), A again (drift: the last A should match the
// first). The report gives requests/s and latency percentiles per phase, and
// GetStrategy rps over health rps (the bar is 0.8).
//
// Without --planner the planner runs in this process (metrics exposer off), so
// server and clients share the machine's cores and other work on the machine
// moves the rps (the load average is printed). The CPU columns are steadier:
// CPU time per request of the process, split into the client threads and the
// rest (the server); their ratios estimate what rps ratio a CPU-bound process
// (or a planner on cores of its own) would reach. MODEL_US is the planner's own
// decision time (monta_strategy_decision_duration_seconds).
// --client_decode=false keeps the clients' protobuf work off the shared cores.

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/table.h"
#include "common/grpc_security_flags.h"
#include "common/job_file.h"
#include "common/proto_names.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "nlohmann/json.hpp"
#include "prometheus/metric_family.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/planner_server.h"

ABSL_FLAG(std::string, planner, "",
          "planner gRPC address; empty: start a planner in this process on "
          "127.0.0.1:0");
ABSL_FLAG(int, clients, 4,
          "client threads, each with its own channel and connection");
ABSL_FLAG(double, seconds, 5, "length of each measured phase");
ABSL_FLAG(double, warmup_seconds, 1,
          "unmeasured warm-up (both RPCs) before the first phase");
ABSL_FLAG(
    std::string, phases, "ABA",
    "phases in order: A = health Check, B = GetStrategy (e.g. ABABA, or B "
    "alone to profile)");
ABSL_FLAG(std::string, job, "examples/monta-paper-2x70b.yaml",
          "job file for GetStrategy (YAML or JSON; see examples/); relative "
          "paths are read "
          "from the runfiles under `bazel run`, then from the workspace");
ABSL_FLAG(double, rpc_timeout_seconds, 5, "deadline of each call");
ABSL_FLAG(
    bool, client_decode, true,
    "clients use the generated stubs (serialize requests, parse replies); "
    "false: send pre-serialized bytes and leave replies unparsed, so that "
    "an in-process run charges less client work to the shared cores");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "leave Abseil's Mutex deadlock detection as the library sets it (on "
          "in Debian's Abseil, as in monta-planner); false turns it off for "
          "this process, to measure what it costs");
ABSL_FLAG(bool, json, false, "print the report as JSON instead of a table");

namespace monta::perf {
namespace {

using Clock = std::chrono::steady_clock;

enum class Rpc { kHealth, kGetStrategy };

struct PhaseResult {
  std::string name;
  Rpc rpc = Rpc::kHealth;
  double seconds = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  std::string first_error;
  double rps = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, mean_us = 0, max_us = 0;
  // CPU time per request of this whole process (server + clients when
  // in-process), of the client threads (their calls, including gRPC work done
  // on them), and the rest (the server's threads and gRPC's own, in-process).
  double cpu_us_per_request = 0;
  double client_cpu_us_per_request = 0;
  double other_cpu_us_per_request = 0;
  // Server-side model time per decision (in-process only).
  double decision_mean_us = -1;
};

// The 1-minute load average (/proc/loadavg), -1 when unreadable: other work on
// the machine shows up here and explains noisy runs.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return in ? one : -1;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Sum and count of the planner's monta_strategy_decision_duration_seconds.
std::pair<double, double> DecisionSeconds(PlannerServer* server) {
  if (server == nullptr) return {0, 0};
  double sum = 0, count = 0;
  for (const auto& family : server->metrics().Collect()) {
    if (family.name != "monta_strategy_decision_duration_seconds") continue;
    for (const auto& m : family.metric) {
      sum += m.histogram.sample_sum;
      count += static_cast<double>(m.histogram.sample_count);
    }
  }
  return {sum, count};
}

double Percentile(std::vector<int64_t>& sorted_ns, double q) {
  if (sorted_ns.empty()) return 0;
  const size_t i =
      std::min(sorted_ns.size() - 1, static_cast<size_t>(q * sorted_ns.size()));
  return sorted_ns[i] / 1e3;
}

class Client {
 public:
  // `raw`: send pre-serialized requests and leave replies unparsed.
  Client(const std::string& target,
         const std::shared_ptr<grpc::ChannelCredentials>& credentials,
         int index, bool raw, const monta::v1::StrategyRequest& job)
      : raw_(raw),
        health_method_("/grpc.health.v1.Health/Check",
                       grpc::internal::RpcMethod::NORMAL_RPC),
        strategy_method_("/monta.v1.Planner/GetStrategy",
                         grpc::internal::RpcMethod::NORMAL_RPC) {
    const std::string bytes = job.SerializeAsString();
    grpc::Slice job_slice(bytes);
    raw_job_ = grpc::ByteBuffer(&job_slice, 1);
    grpc::Slice empty("");
    raw_health_ = grpc::ByteBuffer(&empty, 1);
    grpc::ChannelArguments args;
    // A distinct argument per client: channels with different arguments never
    // share a subchannel, so each client has its own connection (and HTTP/2
    // stream limit).
    args.SetInt("monta.planner_load.client", index);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(target, credentials, args);
    health_ = grpc::health::v1::Health::NewStub(channel_);
    planner_ = monta::v1::Planner::NewStub(channel_);
  }

  bool Connect(absl::Duration timeout) {
    return channel_->WaitForConnected(
        absl::ToChronoTime(absl::Now() + timeout));
  }

  grpc::Status Call(Rpc rpc, const monta::v1::StrategyRequest& job,
                    double timeout_seconds) {
    grpc::ClientContext context;
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(timeout_seconds * 1e6)));
    if (raw_) {
      // Pre-serialized request, reply left as bytes: the client's protobuf work
      // stays off the cores the in-process server shares.
      const bool health = rpc == Rpc::kHealth;
      grpc::ByteBuffer request = health ? raw_health_ : raw_job_;
      grpc::ByteBuffer reply;
      return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer,
                                               grpc::ByteBuffer>(
          channel_.get(), health ? health_method_ : strategy_method_, &context,
          request, &reply);
    }
    if (rpc == Rpc::kHealth) {
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse reply;
      grpc::Status s = health_->Check(&context, request, &reply);
      if (s.ok() &&
          reply.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not SERVING");
      }
      return s;
    }
    monta::v1::StrategyReply reply;
    return planner_->GetStrategy(&context, job, &reply);
  }

  // One typed GetStrategy, for the reply's size and content.
  grpc::Status GetStrategy(const monta::v1::StrategyRequest& job,
                           monta::v1::StrategyReply* reply) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return planner_->GetStrategy(&context, job, reply);
  }

 private:
  const bool raw_;
  const grpc::internal::RpcMethod health_method_;
  const grpc::internal::RpcMethod strategy_method_;
  grpc::ByteBuffer raw_job_;
  grpc::ByteBuffer raw_health_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<monta::v1::Planner::Stub> planner_;
};

// What one client thread saw in a phase.
struct ThreadTally {
  std::vector<int64_t> latencies_ns;  // successful calls only
  int64_t errors = 0;
  std::string first_error;
  double cpu_seconds = 0;
};

// Fills `r`'s counts, latency percentiles and CPU shares from the client
// threads' tallies; `cpu_seconds` is the whole process's CPU over the phase.
void SummarizeTallies(const std::vector<ThreadTally>& per_thread,
                      double cpu_seconds, PhaseResult* r) {
  std::vector<int64_t> all;
  double client_cpu = 0;
  for (const ThreadTally& t : per_thread) {
    client_cpu += t.cpu_seconds;
    all.insert(all.end(), t.latencies_ns.begin(), t.latencies_ns.end());
    r->errors += t.errors;
    if (r->first_error.empty()) r->first_error = t.first_error;
  }
  std::sort(all.begin(), all.end());
  r->ok = static_cast<int64_t>(all.size());
  r->rps = r->ok / r->seconds;
  r->p50_us = Percentile(all, 0.50);
  r->p90_us = Percentile(all, 0.90);
  r->p99_us = Percentile(all, 0.99);
  r->max_us = all.empty() ? 0 : all.back() / 1e3;
  double sum = 0;
  for (int64_t v : all) sum += static_cast<double>(v);
  r->mean_us = all.empty() ? 0 : sum / static_cast<double>(all.size()) / 1e3;
  if (r->ok + r->errors > 0) {
    const double calls = static_cast<double>(r->ok + r->errors);
    r->cpu_us_per_request = cpu_seconds * 1e6 / calls;
    r->client_cpu_us_per_request = client_cpu * 1e6 / calls;
    r->other_cpu_us_per_request = (cpu_seconds - client_cpu) * 1e6 / calls;
  }
}

// Every client calls `rpc` back to back for `seconds`.
PhaseResult RunPhase(const std::string& name, Rpc rpc, double seconds,
                     std::vector<std::unique_ptr<Client>>& clients,
                     const monta::v1::StrategyRequest& job,
                     PlannerServer* server) {
  const double timeout = absl::GetFlag(FLAGS_rpc_timeout_seconds);
  std::vector<ThreadTally> per_thread(clients.size());
  absl::Notification go;
  Clock::time_point end;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      ThreadTally& mine = per_thread[i];
      mine.latencies_ns.reserve(1 << 16);
      go.WaitForNotification();
      const double cpu_start = ThreadCpuSeconds();
      while (true) {
        const Clock::time_point t0 = Clock::now();
        if (t0 >= end) break;
        grpc::Status s = clients[i]->Call(rpc, job, timeout);
        const Clock::time_point t1 = Clock::now();
        if (s.ok()) {
          mine.latencies_ns.push_back(
              std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0)
                  .count());
        } else if (mine.errors++ == 0) {
          mine.first_error =
              absl::StrCat(s.error_code(), ": ", s.error_message());
        }
      }
      mine.cpu_seconds = ThreadCpuSeconds() - cpu_start;
    });
  }
  const auto [decision_sum0, decision_count0] = DecisionSeconds(server);
  const double cpu0 = CpuSeconds();
  const Clock::time_point start = Clock::now();
  end = start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  go.Notify();
  for (auto& t : threads) t.join();
  const Clock::time_point stop = Clock::now();
  const double cpu = CpuSeconds() - cpu0;
  const auto [decision_sum1, decision_count1] = DecisionSeconds(server);

  PhaseResult r;
  r.name = name;
  r.rpc = rpc;
  r.seconds = std::chrono::duration<double>(stop - start).count();
  SummarizeTallies(per_thread, cpu, &r);
  if (server != nullptr && decision_count1 > decision_count0) {
    r.decision_mean_us = (decision_sum1 - decision_sum0) /
                         (decision_count1 - decision_count0) * 1e6;
  }
  return r;
}

absl::StatusOr<monta::v1::StrategyRequest> LoadJob(const std::string& path) {
  absl::StatusOr<monta::v1::StrategyRequest> job = LoadJobFile(path);
  if (job.ok() || path.empty() || path[0] == '/' ||
      !absl::IsNotFound(job.status()))
    return job;
  // `bazel run` starts in the runfiles tree; a path given by hand is more
  // likely relative to the directory bazel was run from, or the workspace.
  for (const char* env :
       {"BUILD_WORKING_DIRECTORY", "BUILD_WORKSPACE_DIRECTORY"}) {
    const char* dir = std::getenv(env);
    if (dir == nullptr) continue;
    absl::StatusOr<monta::v1::StrategyRequest> other =
        LoadJobFile(absl::StrCat(dir, "/", path));
    if (other.ok() || !absl::IsNotFound(other.status())) return other;
  }
  return job;
}

// The server under load (when in-process), its address and the connected
// clients, with one sample decision proving the job is valid for it.
struct Setup {
  std::unique_ptr<PlannerServer> server;  // null when --planner names one
  std::string target;
  std::vector<std::unique_ptr<Client>> clients;
  monta::v1::StrategyReply sample;
};

// The --tls_* / --insecure flags; without any of them an in-process planner
// (no --planner) is reached over plaintext loopback, as before mTLS. With the
// TLS files, the in-process planner serves them too (so the certificate must
// name 127.0.0.1) and the clients present them.
absl::StatusOr<GrpcSecurityOptions> LoadSecurity() {
  absl::StatusOr<GrpcSecurityOptions> security = GrpcSecurityFromFlags();
  if (security.ok() || !absl::GetFlag(FLAGS_planner).empty()) return security;
  GrpcSecurityOptions none;
  if (absl::GetFlag(FLAGS_tls_ca_file).empty() &&
      absl::GetFlag(FLAGS_tls_cert_file).empty() &&
      absl::GetFlag(FLAGS_tls_key_file).empty()) {
    none.insecure = true;
    return none;
  }
  return security;
}

// Starts the in-process planner unless --planner names one, connects
// `n_clients` clients and asks for one decision. Messages go to stderr; the
// caller exits 1 on an error.
absl::StatusOr<Setup> SetUp(int n_clients,
                            const monta::v1::StrategyRequest& job) {
  Setup setup;
  setup.target = absl::GetFlag(FLAGS_planner);
  absl::StatusOr<GrpcSecurityOptions> security = LoadSecurity();
  if (!security.ok()) return security.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(*security);
  if (!credentials.ok()) return credentials.status();
  if (setup.target.empty()) {
    PlannerOptions options;
    options.grpc_security = *security;
    options.grpc_address = "127.0.0.1:0";
    options.metrics_address = "";
    absl::StatusOr<std::unique_ptr<PlannerServer>> started =
        PlannerServer::Start(options);
    if (!started.ok()) {
      return absl::Status(
          started.status().code(),
          absl::StrCat("starting the planner: ", started.status().ToString()));
    }
    setup.server = *std::move(started);
    setup.target = absl::StrCat("127.0.0.1:", setup.server->grpc_port());
  }
  for (int i = 0; i < n_clients; ++i) {
    setup.clients.push_back(
        std::make_unique<Client>(setup.target, *credentials, i,
                                 !absl::GetFlag(FLAGS_client_decode), job));
    if (!setup.clients.back()->Connect(absl::Seconds(10))) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", setup.target));
    }
  }
  // One decision up front: the job must be valid for this planner.
  grpc::Status s = setup.clients[0]->GetStrategy(job, &setup.sample);
  if (!s.ok()) {
    return absl::UnknownError(
        absl::StrCat("GetStrategy(", absl::GetFlag(FLAGS_job),
                     "): ", s.error_code(), ": ", s.error_message()));
  }
  return setup;
}

// The phases of --phases in order, after the warm-up.
std::vector<PhaseResult> RunPhases(const std::string& phase_letters,
                                   double seconds, Setup& setup,
                                   const monta::v1::StrategyRequest& job) {
  PlannerServer* server = setup.server.get();
  const double warmup = absl::GetFlag(FLAGS_warmup_seconds);
  if (warmup > 0) {
    RunPhase("warmup", Rpc::kHealth, warmup / 2, setup.clients, job, server);
    RunPhase("warmup", Rpc::kGetStrategy, warmup / 2, setup.clients, job,
             server);
  }
  std::vector<PhaseResult> phases;
  int a = 0, b = 0;
  for (const char c : phase_letters) {
    phases.push_back(
        c == 'A'
            ? RunPhase(absl::StrCat("A", ++a, " health.Check"), Rpc::kHealth,
                       seconds, setup.clients, job, server)
            : RunPhase(absl::StrCat("B", ++b, " GetStrategy"),
                       Rpc::kGetStrategy, seconds, setup.clients, job, server));
  }
  return phases;
}

// The ratios the report ends with, over all phases of each kind.
struct Summary {
  int a = 0, b = 0;  // health and GetStrategy phases
  double ratio = 0;
  double ratio_vs_best_health = 0;
  double cpu_ratio = 0;
  double server_cpu_ratio = 0;
  double drift = 0;
  int64_t errors = 0;
};

constexpr double kBar = 0.8;

Summary Summarize(const std::vector<PhaseResult>& phases, bool in_process) {
  Summary out;
  // Means over the phases of each kind; drift compares the last A with the
  // first.
  double health_sum = 0, health_best = 0, strategy_sum = 0;
  double health_cpu_sum = 0, strategy_cpu_sum = 0;
  double health_server_cpu_sum = 0, strategy_server_cpu_sum = 0;
  double first_health = 0, last_health = 0;
  for (const auto& p : phases) {
    out.errors += p.errors;
    if (p.rpc == Rpc::kHealth) {
      ++out.a;
      health_sum += p.rps;
      health_cpu_sum += p.cpu_us_per_request;
      health_server_cpu_sum += p.other_cpu_us_per_request;
      health_best = std::max(health_best, p.rps);
      if (first_health == 0) first_health = p.rps;
      last_health = p.rps;
    } else {
      ++out.b;
      strategy_sum += p.rps;
      strategy_cpu_sum += p.cpu_us_per_request;
      strategy_server_cpu_sum += p.other_cpu_us_per_request;
    }
  }
  const int a = out.a, b = out.b;
  const double health_mean = a > 0 ? health_sum / a : 0;
  const double strategy_mean = b > 0 ? strategy_sum / b : 0;
  out.ratio = health_mean > 0 ? strategy_mean / health_mean : 0;
  out.ratio_vs_best_health = health_best > 0 ? strategy_mean / health_best : 0;
  // What the ratio would be if this process were CPU-bound and alone on the
  // machine: CPU per health call over CPU per decision. Less sensitive than rps
  // to other work taking the cores.
  out.cpu_ratio = a > 0 && b > 0 && strategy_cpu_sum > 0
                      ? (health_cpu_sum / a) / (strategy_cpu_sum / b)
                      : 0;
  // The same for the server's share alone (in-process): the ratio a planner
  // would reach on cores of its own, its clients elsewhere.
  out.server_cpu_ratio =
      in_process && a > 0 && b > 0 && strategy_server_cpu_sum > 0
          ? (health_server_cpu_sum / a) / (strategy_server_cpu_sum / b)
          : 0;
  out.drift = first_health > 0 ? last_health / first_health : 0;
  return out;
}

// Everything the report prints.
struct Report {
  const Setup& setup;
  const monta::v1::StrategyRequest& job;
  int n_clients;
  double seconds;
  unsigned cores;
  double load_before, load_after;
  const std::vector<PhaseResult>& phases;
  Summary summary;
};

void PrintJson(const Report& report) {
  const Summary& sum = report.summary;
  const bool in_process = report.setup.server != nullptr;
  nlohmann::json out;
  out["target"] = report.setup.target;
  out["in_process"] = in_process;
  out["clients"] = report.n_clients;
  out["seconds_per_phase"] = report.seconds;
  out["cores"] = report.cores;
  out["load_average_1m"] = {report.load_before, report.load_after};
  out["job"] = absl::GetFlag(FLAGS_job);
  out["client_decode"] = absl::GetFlag(FLAGS_client_decode);
  out["mutex_deadlock_detection"] =
      absl::GetFlag(FLAGS_mutex_deadlock_detection);
  out["request_bytes"] = report.job.ByteSizeLong();
  out["reply_bytes"] = report.setup.sample.ByteSizeLong();
  out["candidates"] = report.setup.sample.candidates_size();
  out["chosen"] = monta::ShortName(report.setup.sample.chosen().kind());
  for (const auto& p : report.phases) {
    nlohmann::json j = {
        {"name", p.name},
        {"rpc", p.rpc == Rpc::kHealth ? "health.Check" : "GetStrategy"},
        {"seconds", p.seconds},
        {"requests", p.ok},
        {"errors", p.errors},
        {"rps", p.rps},
        {"p50_us", p.p50_us},
        {"p90_us", p.p90_us},
        {"p99_us", p.p99_us},
        {"mean_us", p.mean_us},
        {"max_us", p.max_us},
        {"cpu_us_per_request", p.cpu_us_per_request},
        {"client_cpu_us_per_request", p.client_cpu_us_per_request},
        {"other_cpu_us_per_request", p.other_cpu_us_per_request}};
    if (!p.first_error.empty()) j["first_error"] = p.first_error;
    if (p.decision_mean_us >= 0) j["decision_mean_us"] = p.decision_mean_us;
    out["phases"].push_back(j);
  }
  if (sum.a > 0 && sum.b > 0) {
    out["ratio_getstrategy_over_health"] = sum.ratio;
    out["ratio_getstrategy_over_best_health"] = sum.ratio_vs_best_health;
    out["bar_met"] = sum.ratio >= kBar;
    out["cpu_ratio_health_over_getstrategy"] = sum.cpu_ratio;
    if (in_process) {
      out["server_cpu_ratio_health_over_getstrategy"] = sum.server_cpu_ratio;
    }
  }
  if (sum.a > 1) out["health_drift_ratio"] = sum.drift;
  out["bar"] = kBar;
  std::cout << out.dump(2) << std::endl;
}

// The table's heading: where the load went and what it sent.
void PrintTableHeading(const Report& report) {
  const bool in_process = report.setup.server != nullptr;
  const monta::v1::StrategyReply& sample = report.setup.sample;
  std::cout << absl::StrFormat(
      "planner %s (%s), %d clients x %.1fs per phase, %u cores here%s\n"
      "1-minute load average before/after: %.2f/%.2f\n"
      "job %s: request %u bytes, reply %u bytes (%d candidates, chosen %s)\n"
      "clients %s%s\n\n",
      report.setup.target, in_process ? "in-process" : "remote",
      report.n_clients, report.seconds, report.cores,
      in_process ? ", shared by the server and the clients" : "",
      report.load_before, report.load_after, absl::GetFlag(FLAGS_job),
      report.job.ByteSizeLong(), sample.ByteSizeLong(),
      sample.candidates_size(), monta::ShortName(sample.chosen().kind()),
      absl::GetFlag(FLAGS_client_decode)
          ? "use the generated stubs"
          : "send pre-serialized bytes, replies unparsed",
      absl::GetFlag(FLAGS_mutex_deadlock_detection)
          ? ""
          : "; Abseil Mutex deadlock detection off");
}

// The ratios under the table, and each phase's first error.
void PrintTableFooter(const Report& report) {
  const Summary& sum = report.summary;
  const bool in_process = report.setup.server != nullptr;
  if (sum.a > 0 && sum.b > 0) {
    std::cout << absl::StrFormat(
        "\nGetStrategy rps / health rps: %.3f (means over the phases; %.3f "
        "vs the fastest A) -> bar %.2f %s\n",
        sum.ratio, sum.ratio_vs_best_health, kBar,
        sum.ratio >= kBar ? "met" : "NOT met");
    std::cout << absl::StrFormat(
        "CPU per health call / CPU per GetStrategy: %.3f (%s)\n", sum.cpu_ratio,
        in_process ? "the rps ratio this process, CPU-bound and alone "
                     "on the machine, would reach"
                   : "the clients only: the server is elsewhere");
    if (in_process) {
      std::cout << absl::StrFormat(
          "server CPU per health call / per GetStrategy: %.3f (the rps "
          "ratio of a CPU-bound planner with its clients elsewhere)\n",
          sum.server_cpu_ratio);
    }
  }
  if (sum.a > 1) {
    std::cout << absl::StrFormat("health drift, last A / first A: %.3f\n",
                                 sum.drift);
  }
  for (const auto& p : report.phases) {
    if (!p.first_error.empty()) {
      std::cout << p.name << ": first error: " << p.first_error << "\n";
    }
  }
}

void PrintTable(const Report& report) {
  PrintTableHeading(report);
  client::Table table(
      {"PHASE", "REQUESTS", "ERRORS", "RPS", "P50_US", "P90_US", "P99_US",
       "MAX_US", "CPU_US/REQ",
       report.setup.server != nullptr ? "CLIENTS+SERVER" : "CLIENTS+OTHER",
       "MODEL_US"});
  for (const auto& p : report.phases) {
    table.AddRow(
        {p.name, absl::StrCat(p.ok), absl::StrCat(p.errors),
         absl::StrFormat("%.0f", p.rps), absl::StrFormat("%.0f", p.p50_us),
         absl::StrFormat("%.0f", p.p90_us), absl::StrFormat("%.0f", p.p99_us),
         absl::StrFormat("%.0f", p.max_us),
         absl::StrFormat("%.1f", p.cpu_us_per_request),
         absl::StrFormat("%.0f+%.0f", p.client_cpu_us_per_request,
                         p.other_cpu_us_per_request),
         p.decision_mean_us >= 0 ? absl::StrFormat("%.1f", p.decision_mean_us)
                                 : "-"});
  }
  std::cout << table.Render();
  PrintTableFooter(report);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "planner_load [--planner ADDR] [--clients N] [--seconds S] [--job FILE] "
      "[--json]: "
      "GetStrategy throughput and latency against gRPC health Check");
  absl::ParseCommandLine(argc, argv);
  const int n_clients = absl::GetFlag(FLAGS_clients);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (n_clients < 1 || seconds <= 0) {
    std::cerr << "planner_load: --clients must be >= 1 and --seconds > 0\n";
    return 2;
  }
  const std::string phase_letters = absl::GetFlag(FLAGS_phases);
  if (phase_letters.empty() ||
      phase_letters.find_first_not_of("AB") != std::string::npos) {
    std::cerr << "planner_load: --phases: a string of A (health) and B "
                 "(GetStrategy)\n";
    return 2;
  }
  absl::StatusOr<monta::v1::StrategyRequest> job =
      LoadJob(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    std::cerr << "planner_load: --job: " << job.status() << "\n";
    return 2;
  }

  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  absl::StatusOr<Setup> setup = SetUp(n_clients, *job);
  if (!setup.ok()) {
    std::cerr << "planner_load: " << setup.status().message() << "\n";
    return 1;
  }

  const double load_before = LoadAverage();
  const std::vector<PhaseResult> phases =
      RunPhases(phase_letters, seconds, *setup, *job);
  const double load_after = LoadAverage();
  const Report report{*setup,
                      *job,
                      n_clients,
                      seconds,
                      std::thread::hardware_concurrency(),
                      load_before,
                      load_after,
                      phases,
                      Summarize(phases, setup->server != nullptr)};
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(report);
  } else {
    PrintTable(report);
  }
  setup->clients.clear();
  if (setup->server != nullptr) setup->server->Shutdown(absl::Seconds(1));
  return report.summary.errors > 0 ? 1 : 0;
}

}  // namespace
}  // namespace monta::perf

int main(int argc, char** argv) { return monta::perf::Main(argc, argv); }
