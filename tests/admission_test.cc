// The real monta-planner binary with its admission webhook on loopback (the
// flags the manifests pass): HTTPS reviews, the decision log line, the
// admission metrics on /metrics, clean SIGTERM; bad TLS flags refuse to start.
#include <csignal>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/admission/test_certs.h"
#include "tests/testing/paper_job.h"
#include "tests/testing/process.h"

namespace monta {
namespace {

using json = nlohmann::json;
using testing::PaperJobJson;
using testing::Process;
using testing::ReadFile;
using testing::Runfile;
using testing::TempDir;
using testing::WaitFor;

json Review(const std::string& spec) {
  return {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "e2e-1"},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"operation", "CREATE"},
        {"namespace", "team-moe"},
        {"object",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "trainer-0"},
            {"namespace", "team-moe"},
            {"annotations", {{"monta.io/moe", spec}}}}},
          {"spec",
           {{"containers", {{{"name", "trainer"}, {"image", "t:1"}}}}}}}}}}};
}

TEST(AdmissionProcessTest, PlannerBinaryServesWebhookOverHttps) {
  const std::string dir = TempDir();
  auto certs = admission::WriteSelfSignedCert(dir, "e2e");
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string port_file = dir + "/ports.json";
  auto planner = Process::Start(
      {Runfile("server/monta-planner"), "--listen=127.0.0.1:0", "--insecure",
       "--metrics_listen=127.0.0.1:0", "--webhook_listen=127.0.0.1:0",
       "--tls_cert=" + certs->cert_file, "--tls_key=" + certs->key_file,
       "--bench_on_register=false", "--bench_interval_seconds=0",
       "--port_file=" + port_file},
      dir + "/planner.log");
  ASSERT_TRUE(planner.ok()) << planner.status();
  json ports;
  ASSERT_TRUE(WaitFor(
      [&] {
        ports = json::parse(ReadFile(port_file), nullptr, false);
        return ports.is_object() && ports.value("webhook", 0) > 0;
      },
      absl::Seconds(30)))
      << ReadFile(planner->log_path());

  httplib::SSLClient client("127.0.0.1", ports["webhook"].get<int>());
  client.set_ca_cert_path(certs->cert_file);
  client.enable_server_certificate_verification(true);
  client.set_read_timeout(10);
  auto res =
      client.Post("/mutate", Review(PaperJobJson()).dump(), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const json response = json::parse(res->body)["response"];
  EXPECT_EQ(response["uid"], "e2e-1");
  std::string patch;
  ASSERT_TRUE(absl::Base64Unescape(response.value("patch", ""), &patch));
  EXPECT_TRUE(absl::StrContains(patch, "MONTA_STRATEGY")) << patch;

  json bad = json::parse(PaperJobJson());
  bad["job"]["top_k"] = 5;
  res = client.Post("/validate", Review(bad.dump()).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["response"]["status"]["code"], 422)
      << res->body;

  EXPECT_TRUE(absl::StrContains(ReadFile(planner->log_path()),
                                "admission: Pod team-moe/trainer-0 decision "));
  httplib::Client metrics("127.0.0.1", ports["metrics"].get<int>());
  auto scraped = metrics.Get("/metrics");
  ASSERT_TRUE(scraped);
  EXPECT_TRUE(absl::StrContains(scraped->body,
                                "monta_admission_reviews_total{operation="
                                "\"mutate\",result=\"patched\"} 1"))
      << scraped->body;
  EXPECT_TRUE(absl::StrContains(scraped->body,
                                "monta_admission_reviews_total{operation="
                                "\"validate\",result=\"denied\"} 1"));

  planner->Signal(SIGTERM);
  auto status = planner->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << ReadFile(planner->log_path());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << ReadFile(planner->log_path());
}

TEST(AdmissionProcessTest, BadTlsFlagsRefuseToStart) {
  const std::string dir = TempDir();
  auto missing_key = testing::Run(
      {Runfile("server/monta-planner"), "--listen=127.0.0.1:0", "--insecure",
       "--metrics_listen=", "--webhook_listen=127.0.0.1:0",
       "--tls_cert=" + dir + "/x.crt"});
  EXPECT_EQ(missing_key.exit_code, 2) << missing_key.err;
  EXPECT_TRUE(absl::StrContains(missing_key.err, "--tls_key"))
      << missing_key.err;

  auto unreadable = testing::Run(
      {Runfile("server/monta-planner"), "--listen=127.0.0.1:0", "--insecure",
       "--metrics_listen=", "--webhook_listen=127.0.0.1:0",
       "--tls_cert=" + dir + "/none.crt", "--tls_key=" + dir + "/none.key"});
  EXPECT_EQ(unreadable.exit_code, 1) << unreadable.err;
  EXPECT_TRUE(absl::StrContains(unreadable.err, "none.crt")) << unreadable.err;
}

}  // namespace
}  // namespace monta
