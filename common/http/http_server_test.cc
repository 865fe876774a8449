// The server over real loopback sockets. Slow and over-cap clients come from
// their own loopback addresses (127.0.0.2, ...: all of 127/8 is local), so
// the per-client cap can tell them from the client that must still be
// answered (127.0.0.1). No timed asserts: deadlines are short so that the
// tests end soon, and what is asserted is what happened, never how fast.
#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http/metrics_endpoint.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace monta::http {
namespace {

// A TCP connection to 127.0.0.1:port from `source` (a loopback address).
class Client {
 public:
  Client(int port, const std::string& source = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{};
    tv.tv_sec = 20;  // a safety net for a broken server, not a measurement
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~Client() { ::close(fd_); }

  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Everything until the server closes (or 20 s pass).
  std::string ReadToClose() {
    std::string out = std::exchange(buffered_, "");
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Exactly `n` bytes (fewer when the server closes first).
  std::string Read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }
  // One response: the head, then Content-Length bytes of body.
  std::string ReadResponse() {
    char buf[4096];
    while (true) {
      const size_t end = buffered_.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t at = buffered_.substr(0, end).find("Content-Length: ");
        const size_t length =
            at == std::string::npos ? 0 : std::stoul(buffered_.substr(at + 16));
        if (buffered_.size() >= end + 4 + length) {
          // Pipelined responses may arrive together: keep the next ones.
          std::string response = buffered_.substr(0, end + 4 + length);
          buffered_.erase(0, end + 4 + length);
          return response;
        }
      }
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return std::exchange(buffered_, "");
      buffered_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  std::string buffered_;  // received, not yet returned by ReadResponse
  int fd_ = -1;
  bool connected_ = false;
};

std::string Get(int port, const std::string& path,
                const std::string& source = "127.0.0.1") {
  Client client(port, source);
  if (!client.Send(absl::StrCat("GET ", path,
                                " HTTP/1.1\r\nHost: x\r\n"
                                "Connection: close\r\n\r\n"))) {
    return "";
  }
  return client.ReadToClose();
}

std::unique_ptr<HttpServer> Serve(HttpServerOptions options) {
  options.address = "127.0.0.1:0";
  std::vector<HttpRoute> routes;
  routes.push_back({"GET", "/healthz", [](const HttpRequest&) {
                      HttpResponse r;
                      r.body = "ok\n";
                      return r;
                    }});
  routes.push_back({"POST", "/echo", [](const HttpRequest& request) {
                      HttpResponse r;
                      r.body = request.body;
                      return r;
                    }});
  auto server = HttpServer::Start(std::move(options), std::move(routes));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(HttpServerTest, SlowClientIsCutOffAtTheHeaderDeadline) {
  HttpServerOptions options;
  options.limits.header_timeout = absl::Milliseconds(300);
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  Client slow(server->port(), "127.0.0.2");
  ASSERT_TRUE(slow.connected());
  // A byte at a time, each well inside any per-read timeout: only a deadline
  // on the whole header stops it.
  const std::string request =
      "GET /healthz HTTP/1.1\r\nX-Pad: " + std::string(4000, 'a') + "\r\n\r\n";
  size_t sent = 0;
  for (; sent < request.size(); ++sent) {
    if (!slow.Send(request.substr(sent, 1))) break;
    absl::SleepFor(absl::Milliseconds(20));
    if (server->Stats().timed_out > 0) break;
  }
  EXPECT_LT(sent, request.size()) << "the header was never cut off";
  EXPECT_EQ(slow.ReadToClose(), "");  // closed without an answer
  EXPECT_EQ(server->Stats().timed_out, 1);
  EXPECT_TRUE(absl::StrContains(Get(server->port(), "/healthz"), "\r\n\r\nok"));
}

TEST(HttpServerTest, SlowBodyIsCutOffAtTheBodyDeadline) {
  HttpServerOptions options;
  options.limits.body_timeout = absl::Milliseconds(300);
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  Client slow(server->port(), "127.0.0.2");
  ASSERT_TRUE(slow.Send("POST /echo HTTP/1.1\r\nContent-Length: 4000\r\n\r\n"));
  int sent = 0;
  for (; sent < 4000; ++sent) {
    if (!slow.Send("b")) break;
    absl::SleepFor(absl::Milliseconds(20));
    if (server->Stats().timed_out > 0) break;
  }
  EXPECT_LT(sent, 4000);
  EXPECT_EQ(slow.ReadToClose(), "");
  EXPECT_EQ(server->Stats().timed_out, 1);
  EXPECT_EQ(server->Stats().requests, 0);
}

TEST(HttpServerTest, OverCapClientIsRefusedWhileAnotherIsAnswered) {
  HttpServerOptions options;
  options.limits.max_connections_per_client = 2;
  options.worker_threads = 1;
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Client>(server->port(), "127.0.0.3"));
    ASSERT_TRUE(held.back()->Send("GET /hea"));  // and never more
  }
  // The server accepted both once it counts them; a third is closed at once.
  while (server->Stats().accepted < 2) absl::SleepFor(absl::Milliseconds(5));
  Client extra(server->port(), "127.0.0.3");
  extra.Send("GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(extra.ReadToClose(), "");
  EXPECT_EQ(server->Stats().refused_client_cap, 1);
  const std::string other = Get(server->port(), "/healthz", "127.0.0.4");
  EXPECT_TRUE(absl::StartsWith(other, "HTTP/1.1 200 OK\r\n")) << other;
  EXPECT_TRUE(absl::EndsWith(other, "\r\n\r\nok\n")) << other;
  // The capped client gets in again once one of its connections is gone.
  held.clear();
  std::string again;
  for (int i = 0; i < 200 && again.empty(); ++i) {
    again = Get(server->port(), "/healthz", "127.0.0.3");
    if (again.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(absl::StartsWith(again, "HTTP/1.1 200 OK\r\n")) << again;
}

TEST(HttpServerTest, TotalCapRefusesConnectionsBeyondIt) {
  HttpServerOptions options;
  options.limits.max_connections = 3;
  options.limits.max_connections_per_client = 3;
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<Client>(server->port(),
                                            absl::StrCat("127.0.1.", i + 1)));
  }
  while (server->Stats().accepted < 3) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(Get(server->port(), "/healthz", "127.0.1.9"), "");
  EXPECT_EQ(server->Stats().refused_total_cap, 1);
  EXPECT_EQ(server->Stats().open, 3);
}

TEST(HttpServerTest, ManySlowConnectionsDoNotHoldTheOnlyWorker) {
  HttpServerOptions options;
  options.worker_threads = 1;
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 100; ++i) {
    slow.push_back(std::make_unique<Client>(server->port(),
                                            absl::StrCat("127.0.2.", i + 1)));
    ASSERT_TRUE(slow.back()->Send("POST /echo HTTP/1.1\r\nContent-Length: 9"));
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(absl::EndsWith(Get(server->port(), "/healthz"), "ok\n"));
  }
  EXPECT_EQ(server->Stats().open, 100);
  server->Shutdown();  // returns although 100 requests are half sent
  EXPECT_EQ(server->Stats().open, 0);
}

TEST(HttpServerTest, KeepAlivePipeliningAndErrors) {
  HttpServerOptions options;
  options.max_body_bytes = 16;
  options.max_header_bytes = 1024;
  auto server = Serve(options);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  // Two requests in one write: both answered in order on one connection.
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                  "GET /healthz HTTP/1.1\r\n\r\n"));
  const std::string first = client.ReadResponse();
  EXPECT_TRUE(absl::EndsWith(first, "Connection: keep-alive\r\n\r\nhello"))
      << first;
  const std::string second = client.ReadResponse();
  EXPECT_TRUE(absl::EndsWith(second, "\r\n\r\nok\n")) << second;
  ASSERT_TRUE(client.Send("PUT /healthz HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(client.ReadResponse(), "HTTP/1.1 405 "));
  ASSERT_TRUE(client.Send("GET /nothing HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(client.ReadResponse(), "HTTP/1.1 404 "));
  // Too large a body: read, dropped, 413, closed.
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: 17\r\n\r\n" +
                          std::string(17, 'x')));
  const std::string refused = client.ReadToClose();
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 413 ")) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "Connection: close")) << refused;

  Client big(server->port());
  ASSERT_TRUE(big.Send("GET /healthz HTTP/1.1\r\nX: " + std::string(2000, 'h') +
                       "\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(big.ReadToClose(), "HTTP/1.1 431 "));
  Client old(server->port());
  ASSERT_TRUE(old.Send("GET /healthz HTTP/1.0\r\n\r\n"));
  const std::string closed = old.ReadToClose();  // 1.0: closed after it
  EXPECT_TRUE(absl::EndsWith(closed, "ok\n")) << closed;
  Client chunked(server->port());
  ASSERT_TRUE(chunked.Send(
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(chunked.ReadToClose(), "HTTP/1.1 411 "));
}

TEST(HttpServerTest, ExpectContinueGetsContinueBeforeTheBody) {
  auto server = Serve(HttpServerOptions());
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  ASSERT_TRUE(client.Send(
      "POST /echo HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
      "\r\n"));
  // The server asks for the body before the client sends it.
  const std::string expected = "HTTP/1.1 100 Continue\r\n\r\n";
  EXPECT_EQ(client.Read(expected.size()), expected);
  ASSERT_TRUE(client.Send("abc"));
  const std::string response = client.ReadResponse();
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 OK")) << response;
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\nabc")) << response;
}

TEST(HttpServerTest, BadOptionsNameTheirFlag) {
  HttpServerOptions options;
  options.address = "127.0.0.1:0";
  options.limits.header_timeout = absl::ZeroDuration();
  auto server = HttpServer::Start(options, {});
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "--http_header_timeout_seconds"));
  options.limits = HttpLimits();
  options.limits.max_connections_per_client = 0;
  server = HttpServer::Start(options, {});
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "--http_max_connections_per_client"));
  options.limits = HttpLimits();
  options.address = "nonsense";
  options.name = "--metrics_listen";
  server = HttpServer::Start(options, {});
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "--metrics_listen \"nonsense\""))
      << server.status();
}

TEST(HttpServerTest, SecondServerOnABoundPortFails) {
  auto first = Serve(HttpServerOptions());
  ASSERT_NE(first, nullptr);
  HttpServerOptions options;
  options.address = absl::StrCat("127.0.0.1:", first->port());
  options.name = "metrics address";
  auto second = HttpServer::Start(options, {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(second.status().message(), "Address already in use"))
      << second.status();
}

TEST(MetricsEndpointTest, ServesRegisteredCollectables) {
  HttpServerOptions options;
  options.address = "127.0.0.1:0";
  auto endpoint = MetricsEndpoint::Start(options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("monta_test_total")
      .Help("a test counter")
      .Register(*registry)
      .Add({{"kind", "x"}})
      .Increment(3);
  (*endpoint)->RegisterCollectable(registry);
  const std::string scrape = Get((*endpoint)->port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(scrape, "HTTP/1.1 200 OK\r\n")) << scrape;
  EXPECT_TRUE(absl::StrContains(scrape, "text/plain; version=0.0.4"));
  EXPECT_TRUE(absl::StrContains(scrape, "monta_test_total{kind=\"x\"} 3"))
      << scrape;
  registry.reset();  // a collectable that is gone is skipped
  EXPECT_FALSE(absl::StrContains(Get((*endpoint)->port(), "/metrics"),
                                 "monta_test_total"));
  EXPECT_TRUE(
      absl::StartsWith(Get((*endpoint)->port(), "/other"), "HTTP/1.1 404 "));
}

}  // namespace
}  // namespace monta::http
