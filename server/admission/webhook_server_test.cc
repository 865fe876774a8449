// The webhook over real HTTPS: an in-process planner with the webhook on
// 127.0.0.1:0 and a throwaway self-signed certificate; an httplib SSL client
// that trusts only that certificate.
#include "server/admission/webhook_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/admission/test_certs.h"
#include "server/planner_server.h"
#include "server/planning/strategy_planner.h"
#include "tests/testing/paper_job.h"

namespace monta::admission {
namespace {

using json = nlohmann::json;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

json Review(const json& annotations) {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "trainer-0"}, {"namespace", "team-moe"}}},
      {"spec",
       {{"containers", {{{"name", "trainer"}, {"image", "trainer:1"}}}}}}};
  if (!annotations.is_null()) pod["metadata"]["annotations"] = annotations;
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "uid-1"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"operation", "CREATE"},
            {"namespace", "team-moe"},
            {"object", pod}}}};
}

json PaperSpec() { return json::parse(testing::PaperJobJson()); }

class WebhookServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto certs = WriteSelfSignedCert(TempDir(), "suite");
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCertFiles(*certs);
    PlannerOptions options;
    options.grpc_address = "127.0.0.1:0";
    options.grpc_security.insecure = true;  // gRPC is not under test here
    options.metrics_address = "";
    options.webhook_address = "127.0.0.1:0";
    options.tls_cert_file = certs->cert_file;
    options.tls_key_file = certs->key_file;
    options.webhook_log_decisions = false;
    auto started = PlannerServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    planner_ = started->release();
    ASSERT_GT(planner_->webhook_port(), 0);
  }
  static void TearDownTestSuite() {
    delete planner_;
    delete certs_;
  }

  static std::unique_ptr<httplib::SSLClient> Client(
      const std::string& ca_file) {
    auto client = std::make_unique<httplib::SSLClient>(
        "127.0.0.1", planner_->webhook_port());
    client->set_ca_cert_path(ca_file);
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(10);
    client->set_read_timeout(10);
    client->set_write_timeout(10);
    client->set_tcp_nodelay(true);
    return client;
  }

  static httplib::Result Post(const std::string& path,
                              const std::string& body) {
    return Client(certs_->cert_file)
        ->Post(path.c_str(), body, "application/json");
  }

  static PlannerServer* planner_;
  static TestCertFiles* certs_;
};

PlannerServer* WebhookServerTest::planner_ = nullptr;
TestCertFiles* WebhookServerTest::certs_ = nullptr;

double Counter(prometheus::Registry& registry, const std::string& operation,
               const std::string& result) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "monta_admission_reviews_total") continue;
    for (const auto& metric : family.metric) {
      std::string op, res;
      for (const auto& label : metric.label) {
        if (label.name == "operation") op = label.value;
        if (label.name == "result") res = label.value;
      }
      if (op == operation && res == result) return metric.counter.value;
    }
  }
  return 0;
}

TEST_F(WebhookServerTest, Healthz) {
  auto res = Client(certs_->cert_file)->Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
}

TEST_F(WebhookServerTest, MutateReturnsPatchThatApplies) {
  const double before = Counter(planner_->metrics(), "mutate", "patched");
  const json review = Review({{"monta.io/moe", PaperSpec().dump()}});
  auto res = Post("/mutate", review.dump());
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const json response = json::parse(res->body)["response"];
  EXPECT_EQ(response["uid"], "uid-1");
  EXPECT_EQ(response["allowed"], true);
  ASSERT_EQ(response["patchType"], "JSONPatch");
  std::string patch;
  ASSERT_TRUE(
      absl::Base64Unescape(response["patch"].get<std::string>(), &patch));
  const json patched = review["request"]["object"].patch(json::parse(patch));
  bool found = false;
  for (const json& e : patched["spec"]["containers"][0]["env"]) {
    if (e["name"] == "MONTA_STRATEGY") {
      EXPECT_EQ(e["value"], "tp_dedup_pipelined");
      found = true;
    }
  }
  EXPECT_TRUE(found) << patched.dump();
  EXPECT_EQ(patched["metadata"]["annotations"]["monta.io/strategy"],
            "tp_dedup_pipelined");
  EXPECT_EQ(Counter(planner_->metrics(), "mutate", "patched"), before + 1);
}

TEST_F(WebhookServerTest, ValidateDeniesImpossibleSpec) {
  json spec = PaperSpec();
  spec["placement"] = {{"node_names", {"no-such-node"}}};
  auto res = Post("/validate", Review({{"monta.io/moe", spec.dump()}}).dump());
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200);
  const json response = json::parse(res->body)["response"];
  EXPECT_EQ(response["allowed"], false);
  EXPECT_EQ(response["status"]["code"], 422);
  EXPECT_TRUE(absl::StrContains(
      response["status"]["message"].get<std::string>(), "no-such-node"))
      << res->body;
}

TEST_F(WebhookServerTest, WithoutAnnotationAllowedUntouched) {
  auto res = Post("/mutate", Review(nullptr).dump());
  ASSERT_TRUE(res);
  const json response = json::parse(res->body)["response"];
  EXPECT_EQ(response["allowed"], true);
  EXPECT_FALSE(response.contains("patch"));
}

TEST_F(WebhookServerTest, MalformedReviewIs400AndOversizedBodyIs413) {
  auto res = Post("/mutate", "{\"kind\": \"AdmissionReview\"}");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const double refused = Counter(planner_->metrics(), "validate", "error");
  std::string huge(2 << 20, ' ');
  res = Post("/validate", huge);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(Counter(planner_->metrics(), "validate", "error"), refused + 1);
  res = Client(certs_->cert_file)->Get("/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST_F(WebhookServerTest, ClientThatDoesNotTrustTheCertificateFails) {
  auto other = WriteSelfSignedCert(TempDir(), "untrusted");
  ASSERT_TRUE(other.ok());
  auto res = Client(other->cert_file)->Get("/healthz");
  EXPECT_FALSE(res);
}

TEST_F(WebhookServerTest, ConcurrentClientsAllAnswered) {
  const std::string body =
      Review({{"monta.io/moe", PaperSpec().dump()}}).dump();
  constexpr int kClients = 8;
  constexpr int kRequests = 10;
  std::vector<int> ok(kClients, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Client(certs_->cert_file);
      client->set_keep_alive(true);
      for (int i = 0; i < kRequests; ++i) {
        auto res = client->Post("/mutate", body, "application/json");
        if (res && res->status == 200 &&
            json::parse(res->body)["response"].contains("patch")) {
          ++ok[c];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c)
    EXPECT_EQ(ok[c], kRequests) << "client " << c;
}

TEST(WebhookServerStandaloneTest, RenewedCertificateIsServedWithoutRestart) {
  const std::string dir = TempDir();
  auto first = WriteSelfSignedCert(dir, "first");
  auto second = WriteSelfSignedCert(dir, "second");
  ASSERT_TRUE(first.ok() && second.ok());
  AdmissionHandler handler(
      [](const monta::v1::StrategyRequest&,
         bool) -> absl::StatusOr<monta::v1::StrategyReply> {
        return absl::UnavailableError("unused");
      },
      nullptr);
  WebhookOptions options;
  options.address = "127.0.0.1:0";
  options.tls_cert_file = first->cert_file;
  options.tls_key_file = first->key_file;
  options.cert_check_interval = absl::ZeroDuration();
  auto server = WebhookServer::Start(options, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  auto get = [&](const std::string& ca) {
    httplib::SSLClient client("127.0.0.1", (*server)->port());
    client.set_ca_cert_path(ca);
    client.enable_server_certificate_verification(true);
    auto res = client.Get("/healthz");
    return res && res->status == 200;
  };
  EXPECT_TRUE(get(first->cert_file));
  EXPECT_FALSE(get(second->cert_file));
  // cert-manager's renewal: the files are replaced (atomically, as a secret
  // volume).
  ASSERT_EQ(std::rename(second->cert_file.c_str(), first->cert_file.c_str()),
            0);
  ASSERT_EQ(std::rename(second->key_file.c_str(), first->key_file.c_str()), 0);
  EXPECT_TRUE(get(first->cert_file));  // now holds the second certificate
  (*server)->Shutdown();
}

// --webhook_client_ca_file: only a client presenting a certificate the CA
// signed (the API server's) gets an answer.
TEST(WebhookServerStandaloneTest, ClientCaRequiresTheApiServersCertificate) {
  const std::string dir = TempDir();
  auto serving = WriteSelfSignedCert(dir, "serving-for-client-ca");
  auto ca = WriteTestCa(dir, "apiserver-ca", "apiserver-ca");
  auto other_ca = WriteTestCa(dir, "other-ca", "other-ca");
  ASSERT_TRUE(serving.ok() && ca.ok() && other_ca.ok());
  auto apiserver = WriteTestLeafCert(*ca, dir, "apiserver", "DNS:apiserver");
  auto stranger = WriteTestLeafCert(*other_ca, dir, "stranger", "DNS:x");
  ASSERT_TRUE(apiserver.ok() && stranger.ok());
  AdmissionHandler handler(nullptr, nullptr);
  WebhookOptions options;
  options.address = "127.0.0.1:0";
  options.tls_cert_file = serving->cert_file;
  options.tls_key_file = serving->key_file;
  options.client_ca_file = ca->cert_file;
  auto server = WebhookServer::Start(options, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  auto healthz = [&](const TestCertFiles* client_cert) {
    std::unique_ptr<httplib::SSLClient> client =
        client_cert == nullptr
            ? std::make_unique<httplib::SSLClient>("127.0.0.1",
                                                   (*server)->port())
            : std::make_unique<httplib::SSLClient>(
                  "127.0.0.1", (*server)->port(), client_cert->cert_file,
                  client_cert->key_file);
    client->set_ca_cert_path(serving->cert_file);
    client->enable_server_certificate_verification(true);
    auto res = client->Get("/healthz");
    return res && res->status == 200;
  };
  EXPECT_TRUE(healthz(&*apiserver));
  EXPECT_FALSE(healthz(nullptr));
  EXPECT_FALSE(healthz(&*stranger));
  (*server)->Shutdown();

  options.client_ca_file = dir + "/no-such-ca.crt";
  server = WebhookServer::Start(options, &handler);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(server.status().message(), "--webhook_client_ca_file"))
      << server.status();
}

// Many clients, more connections than workers, no gRPC or registry in the
// process (so the test is meaningful under --config=tsan).
TEST(WebhookServerStandaloneTest, MoreClientsThanWorkersAllAnswered) {
  auto certs = WriteSelfSignedCert(TempDir(), "standalone");
  ASSERT_TRUE(certs.ok());
  AdmissionHandler handler(
      [](const monta::v1::StrategyRequest& request, bool) {
        return planning::PlanStrategy(request, nullptr, absl::Now());
      },
      nullptr);
  WebhookOptions options;
  options.address = "127.0.0.1:0";
  options.tls_cert_file = certs->cert_file;
  options.tls_key_file = certs->key_file;
  options.worker_threads = 2;
  auto server = WebhookServer::Start(options, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string body =
      Review({{"monta.io/moe", PaperSpec().dump()}}).dump();
  constexpr int kClients = 6;
  constexpr int kRequests = 5;
  std::vector<int> ok(kClients, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      httplib::SSLClient client("127.0.0.1", (*server)->port());
      client.set_ca_cert_path(certs->cert_file);
      client.enable_server_certificate_verification(true);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(30);
      for (int i = 0; i < kRequests; ++i) {
        auto res = client.Post("/mutate", body, "application/json");
        if (res && res->status == 200 &&
            json::parse(res->body)["response"].contains("patch")) {
          ++ok[c];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c)
    EXPECT_EQ(ok[c], kRequests) << "client " << c;
  (*server)->Shutdown();
}

// A TCP connection to the webhook from loopback address `source`.
int ConnectFrom(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

// Slow clients over TLS: one trickles its handshake, one completes it and
// trickles its request. Both are cut off at the header deadline (whole, not
// per read) while /healthz keeps answering. No timed asserts.
TEST(WebhookServerStandaloneTest, SlowTlsClientsAreCutOffOthersAnswered) {
  auto certs = WriteSelfSignedCert(TempDir(), "slow");
  ASSERT_TRUE(certs.ok());
  AdmissionHandler handler(nullptr, nullptr);
  WebhookOptions options;
  options.address = "127.0.0.1:0";
  options.tls_cert_file = certs->cert_file;
  options.tls_key_file = certs->key_file;
  options.limits.header_timeout = absl::Milliseconds(300);
  auto server = WebhookServer::Start(options, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  // 1. A handshake that never completes: a ClientHello record header, then
  // one byte at a time.
  const int raw = ConnectFrom(port, "127.0.0.2");
  const std::string hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  for (size_t i = 0; (*server)->Stats().timed_out == 0 && i < 100000; ++i) {
    if (::send(raw, hello.data() + i % hello.size(), 1, MSG_NOSIGNAL) != 1)
      break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ((*server)->Stats().timed_out, 1);
  char byte;
  EXPECT_LE(::recv(raw, &byte, 1, 0), 0);  // closed, nothing answered
  ::close(raw);

  // 2. A finished handshake, then the request a byte at a time.
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  const int fd = ConnectFrom(port, "127.0.0.3");
  SSL_set_fd(ssl, fd);
  ASSERT_EQ(SSL_connect(ssl), 1);
  const std::string request =
      "GET /healthz HTTP/1.1\r\nX-Pad: " + std::string(1000, 'a') + "\r\n\r\n";
  size_t sent = 0;
  for (; sent < request.size() && (*server)->Stats().timed_out == 1; ++sent) {
    if (SSL_write(ssl, request.data() + sent, 1) != 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(sent, request.size());
  EXPECT_EQ((*server)->Stats().timed_out, 2);
  EXPECT_LE(SSL_read(ssl, &byte, 1), 0);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);

  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path(certs->cert_file);
  client.enable_server_certificate_verification(true);
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  (*server)->Shutdown();
}

TEST(WebhookServerStandaloneTest, BadTlsFilesAndAddressesAreRefused) {
  AdmissionHandler handler(nullptr, nullptr);
  WebhookOptions options;
  options.address = "127.0.0.1:0";
  options.tls_cert_file = TempDir() + "/missing.crt";
  options.tls_key_file = TempDir() + "/missing.key";
  auto server = WebhookServer::Start(options, &handler);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument)
      << server.status();

  auto a = WriteSelfSignedCert(TempDir(), "a");
  auto b = WriteSelfSignedCert(TempDir(), "b");
  ASSERT_TRUE(a.ok() && b.ok());
  options.tls_cert_file = a->cert_file;
  options.tls_key_file = b->key_file;  // does not match
  server = WebhookServer::Start(options, &handler);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "does not match"));

  std::string host;
  int port = 0;
  EXPECT_TRUE(SplitHostPort("[::]:8443", &host, &port).ok());
  EXPECT_EQ(host, "::");
  EXPECT_EQ(port, 8443);
  EXPECT_FALSE(SplitHostPort("8443", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("h:99999", &host, &port).ok());
}

}  // namespace
}  // namespace monta::admission
