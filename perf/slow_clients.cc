// Slow-client load on an HTTP(S) endpoint (the admission webhook, a /metrics):
// --slow_connections connections, each from its own loopback source address
// (127.0.1.0 onwards, so a per-client cap does not simply refuse them), send
// one byte of a never-ending request head every --byte_interval_ms (a TLS one
// after a completed handshake); a connection the server closes is opened
// again, so the server faces that many at all times. Meanwhile real requests
// from 127.0.0.1 (a new connection each, TLS handshake included: what a
// starved server fails first) measure latency: p50/p99/max over
// --seconds, a request that fails or takes over --request_timeout_s counted
// at that timeout.
//
//   bazel-bin/perf/slow_clients --target=127.0.0.1:8443 --tls
//       --request=mutate --slow_connections=1000
//
// perf/slow_clients.sh starts a planner (webhook + /metrics) and an agent and
// runs this against each endpoint. Raises its own open-file limit to the hard
// limit (it needs one descriptor per connection).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/http/http_server.h"
#include "common/job_file.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "127.0.0.1:8443", "host:port of the endpoint");
ABSL_FLAG(bool, tls, false, "HTTPS (certificates are not verified)");
ABSL_FLAG(std::string, request, "healthz",
          "the measured request: healthz (GET /healthz), metrics (GET "
          "/metrics) or mutate (POST /mutate, an AdmissionReview of a Pod "
          "annotated with --job_file)");
ABSL_FLAG(std::string, job_file, "examples/monta-paper-2x70b.yaml",
          "job file of the mutate request's monta.io/moe annotation");
ABSL_FLAG(int, slow_connections, 1000, "slow connections held open");
ABSL_FLAG(int, slow_sources, 0,
          "loopback source addresses the slow connections share (127.0.1.0 "
          "onwards, round robin); 0 = one per connection. 1 is a single "
          "greedy client, which a per-client cap refuses");
ABSL_FLAG(int, slow_threads, 4, "threads that feed the slow connections");
ABSL_FLAG(int, byte_interval_ms, 1000,
          "each slow connection sends one byte this often");
ABSL_FLAG(double, warmup_seconds, 5,
          "time to open the slow connections before measuring");
ABSL_FLAG(double, seconds, 15, "measurement time");
ABSL_FLAG(int, request_interval_ms, 20, "pause between measured requests");
ABSL_FLAG(double, request_timeout_s, 5,
          "a measured request that takes longer counts as failed");

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Target {
  sockaddr_in address{};
  SSL_CTX* tls = nullptr;  // null: plain HTTP
};

// A connected socket from `source` (network byte order), with send and
// receive timeouts; -1 on failure.
int Connect(const Target& target, uint32_t source, double timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - tv.tv_sec) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = source;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&target.address),
                sizeof(target.address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One connection, optionally TLS, blocking with the socket's timeouts.
struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;

  bool Open(const Target& target, uint32_t source, double timeout_s) {
    fd = Connect(target, source, timeout_s);
    if (fd < 0) return false;
    if (target.tls == nullptr) return true;
    ssl = SSL_new(target.tls);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
      ERR_clear_error();
      Close();
      return false;
    }
    return true;
  }
  bool Send(const char* data, size_t n) {
    if (ssl != nullptr) return SSL_write(ssl, data, static_cast<int>(n)) > 0;
    return ::send(fd, data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  ssize_t Receive(char* buf, size_t n) {
    if (ssl != nullptr) return SSL_read(ssl, buf, static_cast<int>(n));
    return ::recv(fd, buf, n, 0);
  }
  // Whether the server closed (or reset) the connection; does not block.
  bool ClosedByPeer() const {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
  }
  void Close() {
    if (ssl != nullptr) SSL_free(ssl);
    ssl = nullptr;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Holds `count` slow connections [first, first + count) until `stop`.
struct SlowStats {
  std::atomic<int> open{0};
  std::atomic<int64_t> opened{0};
  std::atomic<int64_t> cut{0};  // closed by the server
};

void FeedSlow(const Target& target, int first, int count, int interval_ms,
              const std::atomic<bool>& stop, SlowStats& stats) {
  const std::string head = "POST /mutate HTTP/1.1\r\nHost: slow\r\nX-Slow: " +
                           std::string(1 << 16, 'a');
  std::vector<Connection> conns(count);
  std::vector<size_t> sent(count, 0);
  const auto pause = std::chrono::microseconds(
      std::max<int64_t>(1, int64_t{interval_ms} * 1000 / std::max(1, count)));
  while (!stop.load()) {
    for (int i = 0; i < count && !stop.load(); ++i) {
      Connection& c = conns[i];
      if (c.fd >= 0 && c.ClosedByPeer()) {
        c.Close();
        --stats.open;
        ++stats.cut;
      }
      if (c.fd < 0) {
        // 127.0.1.0 onwards: --slow_sources addresses, round robin.
        const int sources = absl::GetFlag(FLAGS_slow_sources);
        const int index = sources > 0 ? (first + i) % sources : first + i;
        const uint32_t source = htonl((127u << 24) + 256u + index);
        if (!c.Open(target, source, 2.0)) continue;
        ++stats.open;
        ++stats.opened;
        sent[i] = 0;
      }
      if (!c.Send(head.data() + sent[i] % head.size(), 1)) {
        c.Close();
        --stats.open;
        ++stats.cut;
        continue;
      }
      ++sent[i];
      std::this_thread::sleep_for(pause);
    }
  }
  for (Connection& c : conns) c.Close();
}

// One measured request on a new connection; its latency in seconds, or
// `timeout_s` when it failed.
double Measure(const Target& target, const std::string& request,
               double timeout_s) {
  const Clock::time_point start = Clock::now();
  Connection c;
  bool ok = c.Open(target, htonl(INADDR_LOOPBACK), timeout_s) &&
            c.Send(request.data(), request.size());
  std::string response;
  char buf[16384];
  while (ok && SecondsSince(start) < timeout_s) {
    const ssize_t n = c.Receive(buf, sizeof(buf));
    if (n <= 0) break;  // the request says Connection: close
    response.append(buf, static_cast<size_t>(n));
  }
  c.Close();
  ok = ok && response.rfind("HTTP/1.1 200", 0) == 0;
  const double seconds = SecondsSince(start);
  return ok && seconds < timeout_s ? seconds : timeout_s;
}

std::string MutateBody(const std::string& job_file) {
  auto request = monta::LoadJobFile(job_file);
  if (!request.ok()) {
    std::cerr << "slow_clients: --job_file: " << request.status() << "\n";
    std::exit(2);
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string spec;
  (void)google::protobuf::util::MessageToJsonString(*request, &spec, options);
  nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "trainer-0"},
        {"namespace", "team-moe"},
        {"annotations", {{"monta.io/moe", spec}}}}},
      {"spec", {{"containers", {{{"name", "trainer"}, {"image", "t:1"}}}}}}};
  return nlohmann::json{
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "slow-clients"},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"operation", "CREATE"},
        {"namespace", "team-moe"},
        {"object", pod}}}}
      .dump();
}

std::string RequestBytes(const std::string& kind) {
  if (kind == "healthz" || kind == "metrics") {
    return absl::StrCat(
        "GET /", kind, " HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
  }
  if (kind == "mutate") {
    const std::string body = MutateBody(absl::GetFlag(FLAGS_job_file));
    return absl::StrCat(
        "POST /mutate HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
  }
  std::cerr << "slow_clients: --request: expected healthz, metrics or "
               "mutate, got \""
            << kind << "\"\n";
  std::exit(2);
}

void RaiseFileLimit(int needed) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < static_cast<rlim_t>(needed) + 64) {
    std::cerr << "slow_clients: open-file limit " << limit.rlim_cur
              << " is below --slow_connections + 64; raise ulimit -n\n";
    std::exit(2);
  }
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

Target ParseTarget() {
  std::string host;
  int port = 0;
  absl::Status s = monta::http::SplitHostPort(absl::GetFlag(FLAGS_target),
                                              "--target", &host, &port);
  Target target;
  target.address.sin_family = AF_INET;
  target.address.sin_port = htons(static_cast<uint16_t>(port));
  if (!s.ok() ||
      inet_pton(AF_INET, host.c_str(), &target.address.sin_addr) != 1) {
    std::cerr << "slow_clients: --target: expected IPv4:port\n";
    std::exit(2);
  }
  if (absl::GetFlag(FLAGS_tls)) {
    target.tls = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(target.tls, SSL_VERIFY_NONE, nullptr);
  }
  return target;
}

}  // namespace

int main(int argc, char** argv) {
  monta::ParseFlags(argc, argv,
                    "Slow clients against an HTTP(S) endpoint, and the "
                    "latency of real requests meanwhile.\n\n"
                    "Usage: slow_clients --target=host:port [--tls] "
                    "[--request=healthz|metrics|mutate]\n"
                    "Example: slow_clients --target=127.0.0.1:8443 --tls "
                    "--request=mutate --slow_connections=1000",
                    __FILE__);
  // A write to a connection the server cut must fail, not kill the bench.
  ::signal(SIGPIPE, SIG_IGN);
  const Target target = ParseTarget();
  const std::string request = RequestBytes(absl::GetFlag(FLAGS_request));
  const int slow = absl::GetFlag(FLAGS_slow_connections);
  RaiseFileLimit(slow);
  const int threads = std::max(1, absl::GetFlag(FLAGS_slow_threads));
  std::atomic<bool> stop{false};
  SlowStats stats;
  std::vector<std::thread> feeders;
  for (int t = 0; t < threads; ++t) {
    const int first = slow * t / threads;
    const int count = slow * (t + 1) / threads - first;
    feeders.emplace_back([&, first, count] {
      FeedSlow(target, first, count, absl::GetFlag(FLAGS_byte_interval_ms),
               stop, stats);
    });
  }
  std::this_thread::sleep_for(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_seconds)));
  const int open_at_start = stats.open.load();
  const int64_t cut_at_start = stats.cut.load();
  std::vector<double> latencies;
  int failed = 0;
  const double timeout_s = absl::GetFlag(FLAGS_request_timeout_s);
  const Clock::time_point start = Clock::now();
  while (SecondsSince(start) < absl::GetFlag(FLAGS_seconds)) {
    const double s = Measure(target, request, timeout_s);
    if (s >= timeout_s) ++failed;
    latencies.push_back(s);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(absl::GetFlag(FLAGS_request_interval_ms)));
  }
  const int open_at_end = stats.open.load();
  stop = true;
  for (std::thread& t : feeders) t.join();
  std::printf(
      "target=%s request=%s slow_connections=%d open(start/end)=%d/%d "
      "cut_by_server=%lld samples=%zu failed=%d p50_ms=%.2f p99_ms=%.2f "
      "max_ms=%.2f\n",
      absl::GetFlag(FLAGS_target).c_str(), absl::GetFlag(FLAGS_request).c_str(),
      slow, open_at_start, open_at_end,
      static_cast<long long>(stats.cut.load() - cut_at_start), latencies.size(),
      failed, 1e3 * Percentile(latencies, 0.5),
      1e3 * Percentile(latencies, 0.99), 1e3 * Percentile(latencies, 1.0));
  return 0;
}
