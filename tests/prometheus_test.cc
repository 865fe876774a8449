// A real Prometheus (Debian's /usr/bin/prometheus) scrapes a real planner and
// two real agents on loopback; the tests then ask Prometheus' HTTP API, not the
// exposers, whether the series a dashboard relies on arrive with the right
// labels: intra- and inter-node bandwidth, efficiency, node state, decisions,
// agent registration and `up` for every target, one test each. The last one
// bounds the series count per node. The processes start once for the suite
// (SetUpTestSuite); the tests only query.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kAlive[] = "NODE_STATE_ALIVE";
const std::vector<std::string> kNodes = {"node-a", "node-b"};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://127.0.0.1:<port><target> over HTTP/1.0 (no chunking, the server
// closes the connection after the body). 5 s socket timeouts.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval tv{};
  tv.tv_sec = 5;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect 127.0.0.1:", port, ": ", error));
  }
  const std::string request = absl::StrCat(
      "GET ", target, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("recv: ", std::strerror(errno)));
    }
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // "HTTP/1.0 200 OK\r\n...\r\n\r\nbody"
  const size_t space = raw.find(' ');
  const size_t header_end = raw.find("\r\n\r\n");
  HttpResponse response;
  if (raw.rfind("HTTP/", 0) != 0 || space == std::string::npos ||
      header_end == std::string::npos ||
      !absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::DataLossError(
        absl::StrCat("not an HTTP response: ", raw.substr(0, 200)));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

std::string UrlEncode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// One instant-vector sample of a query result.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::string Label(const Sample& s, const std::string& name) {
  auto it = s.labels.find(name);
  return it == s.labels.end() ? "" : it->second;
}

std::string Describe(const std::vector<Sample>& samples) {
  std::vector<std::string> parts;
  for (const auto& s : samples) {
    std::vector<std::string> labels;
    for (const auto& [k, v] : s.labels)
      labels.push_back(absl::StrCat(k, "=\"", v, "\""));
    parts.push_back(
        absl::StrCat("{", absl::StrJoin(labels, ","), "} ", s.value));
  }
  return parts.empty() ? "(no series)" : absl::StrJoin(parts, "\n  ");
}

// An instant query against Prometheus on `port`; the result vector, or an
// error with Prometheus' answer.
absl::StatusOr<std::vector<Sample>> Query(int port, const std::string& promql) {
  absl::StatusOr<HttpResponse> r =
      HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql));
  if (!r.ok()) return r.status();
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded() ||
      j.value("status", "") != "success" ||
      j["data"].value("resultType", "") != "vector") {
    return absl::InternalError(
        absl::StrCat(promql, ": HTTP ", r->status, ": ", r->body));
  }
  std::vector<Sample> samples;
  for (const auto& item : j["data"]["result"]) {
    Sample s;
    for (const auto& [k, v] : item["metric"].items())
      s.labels[k] = v.get<std::string>();
    const std::string value = item["value"][1].get<std::string>();
    if (!absl::SimpleAtod(value, &s.value)) {
      return absl::InternalError(absl::StrCat(promql, ": bad value ", value));
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

// What the tests observe, started once for the whole suite: the planner, two
// agents that measure themselves, an inter-node bench, one plan and a
// Prometheus scraping them. That takes most of a minute; the tests only read.
struct Suite {
  absl::Status status;  // why the suite could not start; OK when it did
  absl::Time start = absl::Now();
  LocalCluster cluster;
  // Declared after the cluster: destroyed (SIGKILL) first.
  Process prometheus;
  int prometheus_port = 0;
  std::map<std::string, int> agent_ports;
  // Until when the tests poll for their series (one window for all of them,
  // as Prometheus scrapes every target at once).
  absl::Time scrape_deadline;
};

// The planner (--bench_on_register, the default: each agent measures itself)
// and two agents whose nodes declare a 100 GbE NIC (a CPU node's Ethernet is
// not discovered): it is the line rate inter-node efficiency is measured
// against. Fills agent_ports from the agents' port files.
absl::Status StartMonta(Suite& s) {
  absl::Status status = s.cluster.StartPlanner();
  if (!status.ok()) return status;
  const std::string topology_file = s.cluster.dir() + "/nic.yaml";
  {
    std::ofstream out(topology_file);
    out << "nics:\n  - {name: eth0, port: 1, link_layer: Ethernet, "
           "rate_gbps: 100, state: ACTIVE, phys_state: LinkUp}\n";
  }
  std::map<std::string, std::string> port_files;
  for (const auto& node : kNodes) {
    port_files[node] = absl::StrCat(s.cluster.dir(), "/", node, "-ports.json");
    status = s.cluster.StartAgent(node, {"--metrics_listen=127.0.0.1:0",
                                         "--port_file=" + port_files[node],
                                         "--topology_file=" + topology_file});
    if (!status.ok()) return status;
  }
  const bool written = WaitFor(
      [&] {
        for (const auto& node : kNodes) {
          nlohmann::json j =
              nlohmann::json::parse(ReadFile(port_files[node]), nullptr, false);
          if (j.is_discarded() || !j.contains("metrics")) return false;
          s.agent_ports[node] = j["metrics"].get<int>();
        }
        return true;
      },
      absl::Seconds(20));
  for (const auto& node : kNodes) {
    if (!written || s.agent_ports[node] <= 0) {
      return absl::UnavailableError(
          absl::StrCat(node, " wrote no metrics port; agent log:\n",
                       ReadFile(s.cluster.agent(node).log_path())));
    }
  }
  return absl::OkStatus();
}

// prometheus.yml scraping the planner and both agents every second; checked
// with promtool when it is installed.
absl::StatusOr<std::string> WritePrometheusConfig(Suite& s) {
  const std::string config = s.cluster.dir() + "/prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n"
           "  scrape_interval: 1s\n"
           "  scrape_timeout: 1s\n"
           "  evaluation_interval: 1s\n"
           "scrape_configs:\n"
           "  - job_name: monta-planner\n"
           "    static_configs:\n"
           "      - targets: ['127.0.0.1:"
        << s.cluster.metrics_port()
        << "']\n"
           "  - job_name: monta-agent\n"
           "    static_configs:\n"
           "      - targets: ['127.0.0.1:"
        << s.agent_ports["node-a"]
        << "', '127.0.0.1:" << s.agent_ports["node-b"] << "']\n";
  }
  if (access(kPromtool, X_OK) == 0) {
    CommandResult check =
        monta::testing::Run({kPromtool, "check", "config", config});
    if (check.exit_code != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("promtool check config: ", check.out, check.err));
    }
  }
  return config;
}

// Starts Prometheus with `config` on a free port; retries with another port
// when it exits early (the port was taken in between).
absl::Status StartPrometheus(Suite& s, const std::string& config) {
  std::string last_log;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = FreeLoopbackPort();
    if (port == 0) return absl::InternalError("no free port");
    const std::string storage =
        absl::StrCat(s.cluster.dir(), "/tsdb-", attempt);
    const std::string log =
        absl::StrCat(s.cluster.dir(), "/prometheus-", attempt, ".log");
    absl::StatusOr<Process> p =
        Process::Start({kPrometheus, "--config.file=" + config,
                        "--storage.tsdb.path=" + storage,
                        absl::StrCat("--web.listen-address=127.0.0.1:", port)},
                       log);
    if (!p.ok()) return p.status();
    s.prometheus = *std::move(p);
    s.prometheus_port = port;
    // Ready (TSDB open, web up) within a few seconds; an early exit means the
    // port was lost or the configuration was refused.
    const bool ready = WaitFor(
        [&] {
          if (!absl::IsDeadlineExceeded(
                  s.prometheus.Wait(absl::ZeroDuration()).status())) {
            return true;  // exited; checked below
          }
          absl::StatusOr<HttpResponse> r = HttpGet(port, "/-/ready");
          return r.ok() && r->status == 200;
        },
        absl::Seconds(20));
    if (ready && s.prometheus.running()) return absl::OkStatus();
    last_log = ReadFile(log);
  }
  return absl::UnavailableError(
      absl::StrCat("prometheus did not become ready; log:\n", last_log));
}

// Both nodes alive with their three intra-node curves.
absl::Status WaitForSelfMeasurement(Suite& s, absl::Time deadline) {
  for (const auto& node : kNodes) {
    const bool measured = WaitFor(
        [&] {
          if (s.cluster.NodeState(node) != kAlive) return false;
          CommandResult r = s.cluster.Montactl({"--output=json", "node", node});
          nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
          if (j.is_discarded()) return false;
          int intra = 0;
          for (const auto& c : j["curves"])
            intra += c["scope"] == "SCOPE_INTRA_NODE";
          return intra >= 3;
        },
        std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!measured) {
      return absl::DeadlineExceededError(
          absl::StrCat(node, " did not measure itself; agent log:\n",
                       ReadFile(s.cluster.agent(node).log_path())));
    }
  }
  return absl::OkStatus();
}

// An inter-node bench of the two nodes and one GetStrategy decision.
absl::Status BenchAndPlan(Suite& s, absl::Time deadline) {
  const int64_t left_seconds = absl::ToInt64Seconds(deadline - absl::Now());
  CommandResult bench = s.cluster.Montactl(
      {"--output=json", "bench", "--nodes=node-a,node-b", "--ranks_per_node=2",
       absl::StrCat("--bench_timeout_seconds=",
                    std::max<int64_t>(5, left_seconds - 15))});
  nlohmann::json bench_json = nlohmann::json::parse(bench.out, nullptr, false);
  if (bench.exit_code != 0 || bench_json.is_discarded() ||
      bench_json["status"]["state"] != "TASK_STATE_SUCCEEDED") {
    return absl::InternalError(
        absl::StrCat("montactl bench: ", bench.out, bench.err));
  }
  const std::string job = s.cluster.dir() + "/job.yaml";
  {
    std::ofstream out(job);
    out << "job:\n  hidden_size: 1024\n  num_experts: 8\n  top_k: 2\n  "
           "capacity_factor: 1.0\n"
           "  micro_batch_size: 1\n  sequence_length: 2048\n  "
           "bytes_per_element: 2\n"
           "  moe_layers: 4\n  world_size: 4\n  tensor_parallel_size: 2\n"
           "  expert_parallel_size: 2\n  pipeline_parallel_size: 1\n  "
           "data_parallel_size: 2\n"
           "  experts_tensor_parallel: true\n";
  }
  CommandResult plan =
      s.cluster.Montactl({"--output=json", "plan", "--job=" + job,
                          "--node_names=node-a,node-b", "--gpus_per_node=2"});
  if (plan.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("montactl plan: ", plan.out, plan.err));
  }
  return absl::OkStatus();
}

absl::Status StartSuite(Suite& s) {
  // Measurement and the bench share one budget, as in a real first minute.
  const absl::Time deadline = s.start + absl::Seconds(55);
  absl::Status status = StartMonta(s);
  if (!status.ok()) return status;
  absl::StatusOr<std::string> config = WritePrometheusConfig(s);
  if (!config.ok()) return config.status();
  // Prometheus starts while the agents measure themselves; its first scrape
  // comes ~5 s after start (the scrape manager's reload throttle).
  status = StartPrometheus(s, *config);
  if (!status.ok()) return status;
  std::cout << "prometheus ready on port " << s.prometheus_port << " after "
            << absl::FormatDuration(absl::Now() - s.start) << std::endl;
  status = WaitForSelfMeasurement(s, deadline);
  if (!status.ok()) return status;
  status = BenchAndPlan(s, deadline);
  if (!status.ok()) return status;
  std::cout << "bench and plan done after "
            << absl::FormatDuration(absl::Now() - s.start) << std::endl;
  s.scrape_deadline = absl::Now() + absl::Seconds(45);
  return absl::OkStatus();
}

// A condition on one query's result: "" when satisfied, else what is missing.
using Verify = std::function<std::string(const std::vector<Sample>&)>;

// Samples of each node (label `node`).
std::map<std::string, std::vector<const Sample*>> ByNode(
    const std::vector<Sample>& samples) {
  std::map<std::string, std::vector<const Sample*>> m;
  for (const auto& s : samples) m[Label(s, "node")].push_back(&s);
  return m;
}

// Every node has a series of job `job_name` with value 1.
Verify NodesEqualOne(const std::string& job_name) {
  return [job_name](const std::vector<Sample>& samples) -> std::string {
    std::set<std::string> seen;
    for (const auto& s : samples) {
      if (Label(s, "job") == job_name && s.value == 1)
        seen.insert(Label(s, "node"));
    }
    for (const auto& node : kNodes) {
      if (seen.count(node) == 0) return node + " missing";
    }
    return "";
  };
}

class PrometheusTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access(kPrometheus, X_OK) != 0) return;  // every test skips
    suite_ = new Suite;
    suite_->status = StartSuite(*suite_);
  }
  static void TearDownTestSuite() {
    delete suite_;
    suite_ = nullptr;
  }
  void SetUp() override {
    if (suite_ == nullptr) {
      GTEST_SKIP() << kPrometheus
                   << " is not installed (Debian package `prometheus`; "
                      "scripts/setup.sh installs it): skipping the "
                      "real-Prometheus scrape tests";
    }
    ASSERT_TRUE(suite_->status.ok()) << suite_->status;
  }

  // Polls `query` until `verify` accepts its result or the suite's scrape
  // window closes. "" on success, else the last complaint and the series.
  static std::string Poll(const std::string& query, const Verify& verify) {
    std::string last;
    const absl::Time polling = absl::Now();
    WaitFor(
        [&] {
          absl::StatusOr<std::vector<Sample>> samples =
              Query(suite_->prometheus_port, query);
          last = samples.ok() ? verify(*samples) : samples.status().ToString();
          if (!last.empty() && samples.ok()) {
            last += "\n  " + Describe(*samples);
          }
          return last.empty();
        },
        std::max(absl::ZeroDuration(), suite_->scrape_deadline - absl::Now()));
    std::cout << query << ": " << (last.empty() ? "present" : "still missing")
              << " after " << absl::FormatDuration(absl::Now() - polling)
              << std::endl;
    return last;
  }

  static Suite* suite_;
};

Suite* PrometheusTest::suite_ = nullptr;

// The three curves each agent measured on registration.
TEST_F(PrometheusTest, IntraNodeBusBandwidthOfEveryNode) {
  const std::string query =
      R"(monta_collective_busbw_bytes_per_second{job="monta-planner",scope="intra"})";
  const Verify verify = [](const std::vector<Sample>& samples) -> std::string {
    auto m = ByNode(samples);
    for (const auto& node : kNodes) {
      std::set<std::string> collectives;
      for (const Sample* s : m[node]) {
        if (Label(*s, "n_nodes") == "1" && Label(*s, "nranks") == "2" &&
            !Label(*s, "message_size").empty() && s->value > 0) {
          collectives.insert(Label(*s, "collective"));
        }
      }
      if (collectives !=
          std::set<std::string>{"allgather", "alltoall", "copy"}) {
        return absl::StrCat(node, ": intra collectives {",
                            absl::StrJoin(collectives, ","), "}");
      }
    }
    return "";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

// The 2x2-rank AllToAll sweep, stored under both nodes.
TEST_F(PrometheusTest, InterNodeBusBandwidthUnderBothNodes) {
  const std::string query =
      R"(monta_collective_busbw_bytes_per_second{job="monta-planner",scope="inter"})";
  const Verify verify = [](const std::vector<Sample>& samples) -> std::string {
    auto m = ByNode(samples);
    for (const auto& node : kNodes) {
      int ok = 0;
      for (const Sample* s : m[node]) {
        ok += Label(*s, "collective") == "alltoall" &&
              Label(*s, "nranks") == "4" && Label(*s, "n_nodes") == "2" &&
              s->value > 0;
      }
      if (ok < 3) {
        return absl::StrCat(node, ": ", ok, " inter alltoall buckets");
      }
    }
    return "";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

TEST_F(PrometheusTest, EfficiencyOfBothScopesOnBothNodes) {
  const std::string query =
      R"(monta_alltoall_efficiency_ratio{job="monta-planner"})";
  const Verify verify = [](const std::vector<Sample>& samples) -> std::string {
    auto m = ByNode(samples);
    for (const auto& node : kNodes) {
      std::set<std::string> scopes;
      for (const Sample* s : m[node]) {
        if (s->value > 0 && s->value <= 1 && !Label(*s, "nranks").empty() &&
            !Label(*s, "message_size").empty()) {
          scopes.insert(Label(*s, "scope"));
        }
      }
      if (scopes != std::set<std::string>{"inter", "intra"}) {
        return absl::StrCat(node, ": efficiency scopes {",
                            absl::StrJoin(scopes, ","), "}");
      }
    }
    return "";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

TEST_F(PrometheusTest, EveryNodeAlive) {
  const std::string query = R"(monta_node_state{state="alive"} == 1)";
  EXPECT_EQ(Poll(query, NodesEqualOne("monta-planner")), "") << query;
}

TEST_F(PrometheusTest, DecisionCountedWithItsStrategy) {
  const std::string query =
      R"(monta_strategy_decisions_total{job="monta-planner",result="ok"})";
  const Verify verify = [](const std::vector<Sample>& samples) -> std::string {
    double total = 0;
    for (const auto& s : samples) {
      if (!Label(s, "strategy").empty() && Label(s, "strategy") != "none")
        total += s.value;
    }
    return total >= 1 ? "" : "no ok decision with a strategy label";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

TEST_F(PrometheusTest, InterNodeTaskCounted) {
  const std::string query =
      R"(monta_benchmark_tasks_total{job="monta-planner",scope="inter",result="succeeded"})";
  const Verify verify = [](const std::vector<Sample>& samples) -> std::string {
    return !samples.empty() && samples[0].value >= 1
               ? ""
               : "no succeeded inter task";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

TEST_F(PrometheusTest, EveryAgentRegistered) {
  const std::string query = R"(monta_agent_registered == 1)";
  EXPECT_EQ(Poll(query, NodesEqualOne("monta-agent")), "") << query;
}

TEST_F(PrometheusTest, EveryTargetUp) {
  std::set<std::string> want = {
      absl::StrCat("monta-planner/127.0.0.1:", suite_->cluster.metrics_port())};
  for (const auto& node : kNodes) {
    want.insert(
        absl::StrCat("monta-agent/127.0.0.1:", suite_->agent_ports[node]));
  }
  const std::string query = "up == 1";
  const Verify verify = [&](const std::vector<Sample>& samples) -> std::string {
    std::set<std::string> seen;
    for (const auto& s : samples) {
      seen.insert(absl::StrCat(Label(s, "job"), "/", Label(s, "instance")));
    }
    return seen == want
               ? ""
               : absl::StrCat("up targets {", absl::StrJoin(seen, ","), "}");
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
}

// Series per node stay bounded (message sizes are bucketed). Printed per job
// and per metric name, largest first, for the cardinality budget.
TEST_F(PrometheusTest, SeriesPerNodeStayBounded) {
  std::map<std::string, double> node_counts;
  const std::string query =
      R"(count by (node) ({__name__=~"monta_.+",node!=""}))";
  const Verify verify = [&](const std::vector<Sample>& samples) -> std::string {
    for (const auto& s : samples) node_counts[Label(s, "node")] = s.value;
    for (const auto& node : kNodes) {
      if (node_counts[node] <= 0) return node + ": no series";
    }
    return "";
  };
  EXPECT_EQ(Poll(query, verify), "") << query;
  for (const auto& node : kNodes) {
    std::cout << "monta_* series with node=\"" << node
              << "\": " << node_counts[node] << std::endl;
    EXPECT_LT(node_counts[node], 200) << node;
  }
  const int port = suite_->prometheus_port;
  absl::StatusOr<std::vector<Sample>> per_job =
      Query(port, R"(count by (job) ({__name__=~"monta_.+"}))");
  ASSERT_TRUE(per_job.ok()) << per_job.status();
  for (const auto& s : *per_job) {
    std::cout << "monta_* series of job " << Label(s, "job") << ": " << s.value
              << std::endl;
  }
  absl::StatusOr<std::vector<Sample>> per_name =
      Query(port, R"(sort_desc(count by (__name__) ({__name__=~"monta_.+"})))");
  ASSERT_TRUE(per_name.ok()) << per_name.status();
  for (const auto& s : *per_name) {
    std::cout << "  " << Label(s, "__name__") << ": " << s.value << std::endl;
  }
}

}  // namespace
}  // namespace monta::testing
