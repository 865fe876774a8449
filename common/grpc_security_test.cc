#include "common/grpc_security.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/admission/test_certs.h"

namespace monta {
namespace {

using admission::TestCertFiles;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

class GrpcSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    auto ca = admission::WriteTestCa(dir_, "ca", "test-ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
  }

  TestCertFiles Leaf(const std::string& name, const std::string& san) {
    auto leaf = admission::WriteTestLeafCert(ca_, dir_, name, san);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    return leaf.ok() ? *leaf : TestCertFiles{};
  }

  GrpcSecurityOptions Options(const TestCertFiles& identity) const {
    GrpcSecurityOptions options;
    options.ca_file = ca_.cert_file;
    options.cert_file = identity.cert_file;
    options.key_file = identity.key_file;
    return options;
  }

  // A server with only the health service, on a free loopback port.
  std::unique_ptr<grpc::Server> Serve(const GrpcSecurityOptions& options,
                                      int* port) {
    auto credentials = MakeServerCredentials(options);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *credentials, port);
    return builder.BuildAndStart();
  }

  // One health check over a fresh channel; on success `*server_pem` is the
  // certificate the server presented.
  grpc::Status Check(int port, const GrpcSecurityOptions& options,
                     std::string* server_pem = nullptr) {
    auto credentials = MakeChannelCredentials(options);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a new connection
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), *credentials, args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse reply;
    grpc::Status status = stub->Check(&context, request, &reply);
    if (status.ok() && server_pem != nullptr) {
      auto pems = context.auth_context()->FindPropertyValues(
          GRPC_X509_PEM_CERT_PROPERTY_NAME);
      *server_pem =
          pems.empty() ? "" : std::string(pems[0].data(), pems[0].size());
    }
    return status;
  }

  std::string dir_;
  TestCertFiles ca_;
};

TEST_F(GrpcSecurityTest, NeitherTlsNorInsecureIsRefusedNamingTheFlags) {
  const absl::Status s = ValidateGrpcSecurity(GrpcSecurityOptions{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* flag :
       {"--tls_ca_file", "--tls_cert_file", "--tls_key_file", "--insecure"}) {
    EXPECT_TRUE(absl::StrContains(s.message(), flag)) << s;
  }
  GrpcSecurityOptions partial;
  partial.ca_file = ca_.cert_file;
  EXPECT_FALSE(ValidateGrpcSecurity(partial).ok());
  GrpcSecurityOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(ValidateGrpcSecurity(insecure).ok());
  insecure.cert_file = ca_.cert_file;
  EXPECT_TRUE(absl::StrContains(ValidateGrpcSecurity(insecure).message(),
                                "--insecure excludes"));
}

TEST_F(GrpcSecurityTest, BadFilesAreNamedWithWhatIsWrong) {
  const TestCertFiles a = Leaf("a", "DNS:a");
  const TestCertFiles b = Leaf("b", "DNS:b");
  GrpcSecurityOptions options = Options(a);
  EXPECT_TRUE(ValidateGrpcSecurity(options).ok());
  options.key_file = b.key_file;
  absl::Status s = ValidateGrpcSecurity(options);
  EXPECT_TRUE(absl::StrContains(s.message(), "is not the private key")) << s;
  options = Options(a);
  options.ca_file = dir_ + "/missing.crt";
  s = ValidateGrpcSecurity(options);
  EXPECT_TRUE(absl::StrContains(
      s.message(), "--tls_ca_file " + dir_ + "/missing.crt: cannot read"))
      << s;
  options = Options(a);
  options.cert_file = a.key_file;
  s = ValidateGrpcSecurity(options);
  EXPECT_TRUE(absl::StrContains(s.message(), "expected a PEM certificate"))
      << s;
}

// Another connection's flags (the planner's client to etcd names --etcd_tls_*).
TEST_F(GrpcSecurityTest, ErrorsNameTheConfiguredFlags) {
  GrpcSecurityOptions options;
  options.flag_prefix = "--etcd_tls_";
  options.insecure_flag = "--etcd_insecure";
  absl::Status s = ValidateGrpcSecurity(options);
  for (const char* flag : {"--etcd_tls_ca_file", "--etcd_tls_cert_file",
                           "--etcd_tls_key_file", "--etcd_insecure"}) {
    EXPECT_TRUE(absl::StrContains(s.message(), flag)) << s;
  }
  EXPECT_FALSE(absl::StrContains(s.message(), " --tls_")) << s;
  const TestCertFiles a = Leaf("a", "DNS:a");
  const TestCertFiles b = Leaf("b", "DNS:b");
  options.ca_file = ca_.cert_file;
  options.cert_file = a.cert_file;
  options.key_file = b.key_file;
  s = ValidateGrpcSecurity(options);
  EXPECT_TRUE(absl::StrContains(s.message(), "--etcd_tls_key_file")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "of --etcd_tls_cert_file")) << s;
  options.insecure = true;
  s = ValidateGrpcSecurity(options);
  EXPECT_TRUE(absl::StrContains(s.message(), "--etcd_insecure excludes")) << s;
}

TEST_F(GrpcSecurityTest, CertificateUrisAreRead) {
  const TestCertFiles node =
      Leaf("node", "URI:spiffe://monta/node/n1,DNS:x,URI:https://example.org");
  auto uris = CertificateUris("--tls_cert_file", node.cert_file);
  ASSERT_TRUE(uris.ok()) << uris.status();
  EXPECT_EQ(*uris, (std::vector<std::string>{"spiffe://monta/node/n1",
                                             "https://example.org"}));
}

// Clients check the name they dial against the server's certificate.
TEST_F(GrpcSecurityTest, ServerNameIsVerified) {
  const TestCertFiles client = Leaf("client", "URI:spiffe://monta/node/c");
  for (const auto& [san, ok] :
       {std::pair<std::string, bool>{"IP:127.0.0.1", true},
        {"DNS:elsewhere.example.org", false}}) {
    const TestCertFiles server = Leaf(ok ? "good-server" : "bad-server", san);
    int port = 0;
    std::unique_ptr<grpc::Server> s = Serve(Options(server), &port);
    ASSERT_GT(port, 0);
    const grpc::Status status = Check(port, Options(client));
    EXPECT_EQ(status.ok(), ok) << san << ": " << status.error_message();
    s->Shutdown();
  }
}

// A certificate replaced on disk is served to new connections without a
// restart (what cert-manager's renewal does to a mounted secret).
TEST_F(GrpcSecurityTest, RotatedServerCertificateIsServedWithoutRestart) {
  const TestCertFiles first = Leaf("first", "IP:127.0.0.1");
  const TestCertFiles second = Leaf("second", "IP:127.0.0.1");
  const TestCertFiles client = Leaf("client", "DNS:client");
  const std::string second_pem = Slurp(second.cert_file);
  GrpcSecurityOptions server_options = Options(first);
  server_options.refresh_seconds = 1;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(server_options, &port);
  ASSERT_GT(port, 0);
  std::string served;
  ASSERT_TRUE(Check(port, Options(client), &served).ok());
  EXPECT_EQ(served, Slurp(first.cert_file));
  // Key first, then certificate, each replaced atomically.
  ASSERT_EQ(std::rename(second.key_file.c_str(), first.key_file.c_str()), 0);
  ASSERT_EQ(std::rename(second.cert_file.c_str(), first.cert_file.c_str()), 0);
  // Polled (the provider re-reads every second), not a timed assertion: the
  // bound only stops a broken reload from hanging the test.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (served != second_pem && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(200));
    Check(port, Options(client), &served);
  }
  EXPECT_EQ(served, second_pem);
  server->Shutdown();
}

}  // namespace
}  // namespace monta
