// AdmissionReview documents in, responses out: the patch is decoded and applied
// to the original object with nlohmann's json::patch, and the result checked.
#include "server/admission/admission_handler.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/fabric.pb.h"
#include "server/metrics/planner_metrics.h"
#include "server/registry/registry.h"
#include "tests/testing/paper_job.h"

namespace monta::admission {
namespace {

using json = nlohmann::json;

// The MoNTA paper's job on two A800 nodes: tp_dedup_pipelined wins.
json PaperSpec() { return json::parse(testing::PaperJobJson()); }

json Pod(const json& annotations) {
  json pod = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "trainer-0", "namespace": "team-moe"},
    "spec": {
      "initContainers": [{"name": "fetch", "image": "busybox"}],
      "containers": [
        {"name": "trainer", "image": "trainer:1",
         "env": [{"name": "FOO", "value": "bar"},
                 {"name": "MONTA_STRATEGY", "value": "stale"},
                 {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        {"name": "sidecar", "image": "sidecar:1"}
      ]
    }
  })");
  if (!annotations.is_null()) pod["metadata"]["annotations"] = annotations;
  return pod;
}

json Job(const json& annotations) {
  json job = json::parse(R"({
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "mixtral", "namespace": "team-moe"},
    "spec": {"template": {"spec": {
      "restartPolicy": "Never",
      "containers": [{"name": "trainer", "image": "trainer:1", "env": []},
                     {"name": "logger", "image": "logger:1"}]}}}
  })");
  if (!annotations.is_null()) job["metadata"]["annotations"] = annotations;
  return job;
}

json Review(const json& object, const std::string& operation = "CREATE") {
  const bool is_job = object.value("kind", "") == "Job";
  json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"}};
  review["request"] = {
      {"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
      {"kind",
       {{"group", is_job ? "batch" : ""},
        {"version", "v1"},
        {"kind", is_job ? "Job" : "Pod"}}},
      {"resource",
       {{"group", is_job ? "batch" : ""},
        {"version", "v1"},
        {"resource", is_job ? "jobs" : "pods"}}},
      {"namespace", "team-moe"},
      {"operation", operation},
      {"object", object},
  };
  return review;
}

json MoeAnnotation(const json& spec) { return {{"monta.io/moe", spec.dump()}}; }

// The value of env var `name` in `container`, or "<absent>"; fails on
// duplicates.
std::string EnvValue(const json& container, const std::string& name) {
  std::string value = "<absent>";
  int seen = 0;
  for (const json& e : container.value("env", json::array())) {
    if (e.value("name", "") == name) {
      value = e.value("value", "<valueFrom>");
      ++seen;
    }
  }
  EXPECT_LE(seen, 1) << name << " appears " << seen << " times";
  return value;
}

class AdmissionHandlerTest : public ::testing::Test {
 protected:
  AdmissionHandlerTest()
      : metrics_(prom_), registry_(registry::RegistryOptions{}) {
    AdmissionOptions options;
    options.new_decision_id = [this] {
      return "decision-" + std::to_string(++ids_);
    };
    options.now = [] { return absl::FromUnixSeconds(1800000000); };
    handler_ = std::make_unique<AdmissionHandler>(
        RegistryDecider(&registry_, &metrics_), &metrics_, options);
    // One registered H800 node with 8 GPUs.
    RegisterH800("gpu-a", "i-1");
  }

  void RegisterH800(const std::string& name, const std::string& instance) {
    monta::v1::RegisterRequest r;
    r.set_node_name(name);
    r.set_instance_id(instance);
    for (int i = 0; i < 8; ++i) {
      auto* gpu = r.mutable_topology()->add_gpus();
      gpu->set_index(i);
      gpu->set_name("NVIDIA H800");
    }
    EXPECT_TRUE(registry_.Register(r, Instant::Now()).ok());
  }

  // Sends `review` and returns the parsed response (expects HTTP 200 and the
  // uid).
  json Send(Operation op, const json& review) {
    HttpReply reply = handler_->Handle(op, review.dump());
    EXPECT_EQ(reply.status, 200) << reply.body;
    json response = json::parse(reply.body);
    EXPECT_EQ(response["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(response["kind"], "AdmissionReview");
    EXPECT_EQ(response["response"]["uid"], review["request"]["uid"]);
    return response["response"];
  }

  // Applies the response's patch to `object`.
  static json Apply(const json& response, const json& object) {
    EXPECT_EQ(response.value("patchType", ""), "JSONPatch");
    std::string decoded;
    EXPECT_TRUE(absl::Base64Unescape(response.value("patch", ""), &decoded));
    return object.patch(json::parse(decoded));
  }

  double AdmissionCount(const std::string& operation,
                        const std::string& result) {
    for (const auto& family : prom_.Collect()) {
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

  prometheus::Registry prom_;
  metrics::PlannerMetrics metrics_;
  registry::Registry registry_;
  int ids_ = 0;
  std::unique_ptr<AdmissionHandler> handler_;
};

TEST_F(AdmissionHandlerTest, PodGetsDecisionInEveryContainerAndAnnotations) {
  const json pod = Pod(MoeAnnotation(PaperSpec()));
  const json response = Send(Operation::kMutate, Review(pod));
  EXPECT_EQ(response["allowed"], true);
  EXPECT_FALSE(response.contains("warnings"));
  const json patched = Apply(response, pod);

  const json& containers = patched["spec"]["containers"];
  ASSERT_EQ(containers.size(), 2u);
  std::vector<json> all = {containers[0], containers[1],
                           patched["spec"]["initContainers"][0]};
  for (const json& c : all) {
    SCOPED_TRACE(c.value("name", ""));
    EXPECT_EQ(EnvValue(c, "MONTA_STRATEGY"), "tp_dedup_pipelined");
    EXPECT_GT(std::stoi(EnvValue(c, "MONTA_NUM_CHUNKS")), 1);
    EXPECT_GT(std::stod(EnvValue(c, "MONTA_PREDICTED_ALLTOALL_SECONDS")), 0);
    EXPECT_GT(std::stod(EnvValue(c, "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS")),
              0);
    EXPECT_GE(std::stod(EnvValue(c, "MONTA_SPEEDUP_OVER_FLAT")), 4.0);
    EXPECT_EQ(EnvValue(c, "MONTA_EVIDENCE_SOURCE"), "profile");
    EXPECT_EQ(EnvValue(c, "MONTA_EXPERT_LAYOUT"), "tensor_parallel");
    EXPECT_EQ(EnvValue(c, "MONTA_DECISION_ID"), "decision-1");
  }
  // Existing variables are kept (in place), the stale MONTA_STRATEGY replaced.
  EXPECT_EQ(EnvValue(containers[0], "FOO"), "bar");
  EXPECT_EQ(EnvValue(containers[0], "SECRET"), "<valueFrom>");
  EXPECT_EQ(containers[0]["env"][0]["name"], "FOO");
  EXPECT_EQ(containers[0]["env"][2]["valueFrom"]["secretKeyRef"]["key"], "k");
  // Nothing else changed in the containers.
  EXPECT_EQ(containers[1]["image"], "sidecar:1");

  const json& annotations = patched["metadata"]["annotations"];
  EXPECT_EQ(annotations["monta.io/moe"],
            pod["metadata"]["annotations"]["monta.io/moe"]);
  EXPECT_EQ(annotations["monta.io/strategy"], "tp_dedup_pipelined");
  EXPECT_EQ(annotations["monta.io/decision-id"], "decision-1");
  const json decision =
      json::parse(annotations["monta.io/decision"].get<std::string>());
  EXPECT_EQ(decision["id"], "decision-1");
  EXPECT_EQ(decision["strategy"], "tp_dedup_pipelined");
  EXPECT_EQ(std::to_string(decision["chunks"].get<int>()),
            EnvValue(containers[0], "MONTA_NUM_CHUNKS"));
  EXPECT_GE(decision["speedup_over_flat"].get<double>(), 4.0);
  EXPECT_EQ(decision["decided_at"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(decision["placement"],
            json::parse(R"({"profile": "a800-hgx", "nodes": 2})"));
  EXPECT_EQ(decision["evidence"]["source"], "profile");
  EXPECT_EQ(decision["evidence"]["profile"], "a800-hgx");
  ASSERT_FALSE(decision["evidence"]["curves"].empty());
  // The annotation keeps the lowercase names users script against, not the
  // proto's enum value names. The paper's pipeline is paced by its GPU stages
  // (AllGather + copy): the steady state's resource (docs/MODEL.md §5).
  EXPECT_EQ(decision["bottleneck"], "nvlink");
  EXPECT_EQ(decision["expert_layout"], "tensor_parallel");
  EXPECT_EQ(decision["expert_layout_defaulted"], false);
  for (const json& curve : decision["evidence"]["curves"]) {
    EXPECT_TRUE(curve.contains("role"));
    EXPECT_EQ(curve["role"].get<std::string>().find("CURVE_ROLE"),
              std::string::npos)
        << curve.dump();
    EXPECT_EQ(curve["source"], "profile");
    EXPECT_TRUE(curve.contains("age_seconds"));
  }
  EXPECT_EQ(AdmissionCount("mutate", "patched"), 1);
}

// A spec that does not say whether its experts are tensor-parallel is
// priced with the planner's default, and the patch says which and that it
// was defaulted (never a silent false).
TEST_F(AdmissionHandlerTest, UnsaidExpertLayoutIsNamedAsDefaulted) {
  json spec = PaperSpec();
  spec["job"].erase("experts_tensor_parallel");
  const json pod = Pod(MoeAnnotation(spec));
  const json patched = Apply(Send(Operation::kMutate, Review(pod)), pod);
  EXPECT_EQ(EnvValue(patched["spec"]["containers"][0], "MONTA_EXPERT_LAYOUT"),
            "not_tensor_parallel");
  const json decision =
      json::parse(patched["metadata"]["annotations"]["monta.io/decision"]
                      .get<std::string>());
  EXPECT_EQ(decision["expert_layout"], "not_tensor_parallel");
  EXPECT_EQ(decision["expert_layout_defaulted"], true);
  // Said false: the same layout, not defaulted.
  spec["job"]["experts_tensor_parallel"] = false;
  const json said = Pod(MoeAnnotation(spec));
  const json d2 =
      json::parse(Apply(Send(Operation::kMutate, Review(said)),
                        said)["metadata"]["annotations"]["monta.io/decision"]
                      .get<std::string>());
  EXPECT_EQ(d2["expert_layout"], "not_tensor_parallel");
  EXPECT_EQ(d2["expert_layout_defaulted"], false);
}

TEST_F(AdmissionHandlerTest, JobGetsDecisionInPodTemplate) {
  const json job = Job(MoeAnnotation(PaperSpec()));
  const json response = Send(Operation::kMutate, Review(job));
  const json patched = Apply(response, job);
  const json& containers = patched["spec"]["template"]["spec"]["containers"];
  ASSERT_EQ(containers.size(), 2u);
  for (const json& c : containers) {
    EXPECT_EQ(EnvValue(c, "MONTA_STRATEGY"), "tp_dedup_pipelined");
    EXPECT_EQ(EnvValue(c, "MONTA_DECISION_ID"), "decision-1");
  }
  EXPECT_EQ(containers[0]["env"].size(), 8u);  // the empty array was filled
  EXPECT_EQ(patched["metadata"]["annotations"]["monta.io/strategy"],
            "tp_dedup_pipelined");
  // The template (which had no metadata) carries the decision to the Job's
  // Pods.
  const json& tmpl = patched["spec"]["template"]["metadata"]["annotations"];
  EXPECT_EQ(tmpl["monta.io/decision-id"], "decision-1");
  EXPECT_TRUE(tmpl.contains("monta.io/decision"));
  EXPECT_EQ(patched["spec"]["template"]["spec"]["restartPolicy"], "Never");

  // A Pod of that Job (template annotations + the user's spec) keeps the Job's
  // decision: no second decision, no patch.
  json pod = Pod(tmpl);
  pod["metadata"]["annotations"]["monta.io/moe"] = PaperSpec().dump();
  const json again = Send(Operation::kMutate, Review(pod));
  EXPECT_EQ(again["allowed"], true);
  EXPECT_FALSE(again.contains("patch"));
  EXPECT_EQ(Send(Operation::kValidate, Review(pod))["allowed"], true);
  EXPECT_EQ(AdmissionCount("mutate", "skipped"), 1);
}

TEST_F(AdmissionHandlerTest, ObjectsWithoutTheAnnotationPassUntouched) {
  for (const json& object :
       {Pod(nullptr), Job(nullptr), Pod({{"other", "x"}})}) {
    for (Operation op : {Operation::kMutate, Operation::kValidate}) {
      const json response = Send(op, Review(object));
      EXPECT_EQ(response["allowed"], true);
      EXPECT_FALSE(response.contains("patch"));
      EXPECT_FALSE(response.contains("patchType"));
      EXPECT_FALSE(response.contains("warnings"));
    }
  }
  EXPECT_EQ(AdmissionCount("mutate", "skipped"), 3);
  EXPECT_EQ(AdmissionCount("validate", "skipped"), 3);
}

TEST_F(AdmissionHandlerTest, OtherKindsAndOperationsPassUntouched) {
  json deployment = Review(Pod(MoeAnnotation(PaperSpec())));
  deployment["request"]["kind"] = {
      {"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}};
  EXPECT_FALSE(Send(Operation::kMutate, deployment).contains("patch"));
  const json update = Review(Pod(MoeAnnotation(PaperSpec())), "UPDATE");
  EXPECT_FALSE(Send(Operation::kMutate, update).contains("patch"));
  json bad = PaperSpec();
  bad["job"]["top_k"] = 99;
  EXPECT_EQ(Send(Operation::kValidate,
                 Review(Pod(MoeAnnotation(bad)), "UPDATE"))["allowed"],
            true);
}

TEST_F(AdmissionHandlerTest, BadJsonIsDenied400AndMutateWarns) {
  const json pod = Pod({{"monta.io/moe", "{\"job\": {\"hidden_size\": 4096,"}});
  const json denied = Send(Operation::kValidate, Review(pod));
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["code"], 400);
  EXPECT_EQ(denied["status"]["reason"], "BadRequest");
  const std::string message = denied["status"]["message"];
  EXPECT_TRUE(absl::StartsWith(message, "monta.io/moe: not valid JSON"))
      << message;

  const json mutated = Send(Operation::kMutate, Review(pod));
  EXPECT_EQ(mutated["allowed"], true);
  EXPECT_FALSE(mutated.contains("patch"));
  ASSERT_EQ(mutated["warnings"].size(), 1u);
  EXPECT_TRUE(absl::StrContains(mutated["warnings"][0].get<std::string>(),
                                "not valid JSON"));
  EXPECT_LE(mutated["warnings"][0].get<std::string>().size(), kMaxWarningChars);
  EXPECT_EQ(AdmissionCount("validate", "denied"), 1);
  EXPECT_EQ(AdmissionCount("mutate", "allowed"), 1);
}

// Found by //fuzz:admission_review_fuzz: the parse error quoted the first byte
// of a two-byte UTF-8 character, and the answer's dump() threw (HTTP 500).
TEST_F(AdmissionHandlerTest, BadJsonCutInsideUtf8CharacterIsStill400) {
  const json pod = Pod({{"monta.io/moe", "{\"job\": {\"name\": \u00e9t\"}}"}});
  const json denied = Send(Operation::kValidate, Review(pod));
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["code"], 400);
  EXPECT_TRUE(absl::StartsWith(denied["status"]["message"].get<std::string>(),
                               "monta.io/moe: not valid JSON"));
  const json mutated = Send(Operation::kMutate, Review(pod));
  EXPECT_EQ(mutated["allowed"], true);
  ASSERT_EQ(mutated["warnings"].size(), 1u);
}

TEST_F(AdmissionHandlerTest, UnknownKeyAndWrongShapeAre400NamingTheField) {
  json spec = PaperSpec();
  spec["job"]["hiden_size"] = 4096;
  json denied = Send(Operation::kValidate, Review(Pod(MoeAnnotation(spec))));
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["code"], 400);
  EXPECT_TRUE(absl::StrContains(denied["status"]["message"].get<std::string>(),
                                "job.hiden_size"))
      << denied;

  denied =
      Send(Operation::kValidate, Review(Pod({{"monta.io/moe", "[1, 2]"}})));
  EXPECT_EQ(denied["status"]["code"], 400);
}

TEST_F(AdmissionHandlerTest, ImpossibleJobIs422NamingTheField) {
  json spec = PaperSpec();
  spec["job"]["top_k"] = 9;
  json denied = Send(Operation::kValidate, Review(Job(MoeAnnotation(spec))));
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["code"], 422);
  EXPECT_EQ(denied["status"]["reason"], "Invalid");
  EXPECT_TRUE(absl::StrContains(denied["status"]["message"].get<std::string>(),
                                "job.top_k"))
      << denied;

  spec = PaperSpec();
  spec["job"]["tensor_parallel_size"] = 16;
  spec["job"]["data_parallel_size"] = 1;
  spec["job"]["expert_parallel_size"] = 1;
  denied = Send(Operation::kValidate, Review(Job(MoeAnnotation(spec))));
  EXPECT_EQ(denied["status"]["code"], 422);
  EXPECT_TRUE(absl::StrContains(denied["status"]["message"].get<std::string>(),
                                "tensor_parallel_size"))
      << denied;
}

TEST_F(AdmissionHandlerTest, UnknownNodeIs422AndRegisteredNodeIsAllowed) {
  json spec = json::parse(R"({"job": {"name": "one-node", "hidden_size": 4096,
      "num_experts": 8, "top_k": 2, "micro_batch_size": 1, "sequence_length": 4096,
      "bytes_per_element": 2, "moe_layers": 32, "world_size": 8,
      "tensor_parallel_size": 1, "expert_parallel_size": 8, "pipeline_parallel_size": 1,
      "data_parallel_size": 8}})");
  spec["placement"] = {{"node_names", {"ghost-node"}}};
  const json denied =
      Send(Operation::kValidate, Review(Pod(MoeAnnotation(spec))));
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["code"], 422);
  EXPECT_TRUE(absl::StrContains(denied["status"]["message"].get<std::string>(),
                                "ghost-node"))
      << denied;

  spec["placement"] = {{"node_names", {"gpu-a"}}};
  const json allowed =
      Send(Operation::kValidate, Review(Pod(MoeAnnotation(spec))));
  EXPECT_EQ(allowed["allowed"], true) << allowed;
  const json pod = Pod(MoeAnnotation(spec));
  const json patched = Apply(Send(Operation::kMutate, Review(pod)), pod);
  const json decision =
      json::parse(patched["metadata"]["annotations"]["monta.io/decision"]
                      .get<std::string>());
  EXPECT_EQ(decision["placement"]["node_names"], json::array({"gpu-a"}));
}

TEST_F(AdmissionHandlerTest, PlacementFromProfileAnnotationOrRequired) {
  json spec = PaperSpec();
  spec.erase("placement");
  // Without any placement: denied, and the message says how to give one.
  const json denied =
      Send(Operation::kValidate, Review(Pod(MoeAnnotation(spec))));
  EXPECT_EQ(denied["status"]["code"], 422);
  EXPECT_TRUE(absl::StrContains(denied["status"]["message"].get<std::string>(),
                                "monta.io/profile"))
      << denied;

  // The profile from the workload's annotation; nodes = world_size / 8.
  json annotations = MoeAnnotation(spec);
  annotations["monta.io/profile"] = "a800-hgx";
  const json pod = Pod(annotations);
  const json patched = Apply(Send(Operation::kMutate, Review(pod)), pod);
  const json decision =
      json::parse(patched["metadata"]["annotations"]["monta.io/decision"]
                      .get<std::string>());
  EXPECT_EQ(decision["placement"],
            json::parse(R"({"profile": "a800-hgx", "nodes": 2})"));
  EXPECT_EQ(decision["strategy"], "tp_dedup_pipelined");

  // A profile that does not exist names the annotation and the known profiles.
  annotations["monta.io/profile"] = "tpu-v9";
  const json unknown = Send(Operation::kValidate, Review(Pod(annotations)));
  EXPECT_EQ(unknown["status"]["code"], 422);
  EXPECT_TRUE(absl::StrContains(unknown["status"]["message"].get<std::string>(),
                                "monta.io/profile: unknown profile \"tpu-v9\""))
      << unknown;

  // world_size not a multiple of the profile's GPUs per node.
  spec["placement"] = {{"profile", "a800-hgx"}};
  spec["job"]["world_size"] = 12;
  spec["job"]["data_parallel_size"] = 1;
  spec["job"]["tensor_parallel_size"] = 4;
  spec["job"]["pipeline_parallel_size"] = 3;
  spec["job"]["expert_parallel_size"] = 1;
  const json uneven =
      Send(Operation::kValidate, Review(Pod(MoeAnnotation(spec))));
  EXPECT_EQ(uneven["allowed"], false);
  EXPECT_TRUE(absl::StrContains(uneven["status"]["message"].get<std::string>(),
                                "placement.nodes"))
      << uneven;
}

TEST_F(AdmissionHandlerTest, PlannerFailureAdmitsWithWarning) {
  AdmissionHandler failing(
      [](const monta::v1::StrategyRequest&,
         bool) -> absl::StatusOr<monta::v1::StrategyReply> {
        return absl::InternalError("registry unavailable");
      },
      &metrics_);
  const json review = Review(Pod(MoeAnnotation(PaperSpec())));
  for (Operation op : {Operation::kMutate, Operation::kValidate}) {
    HttpReply reply = failing.Handle(op, review.dump());
    ASSERT_EQ(reply.status, 200);
    const json response = json::parse(reply.body)["response"];
    EXPECT_EQ(response["allowed"], true);
    EXPECT_FALSE(response.contains("patch"));
    ASSERT_EQ(response["warnings"].size(), 1u);
    EXPECT_TRUE(absl::StrContains(response["warnings"][0].get<std::string>(),
                                  "registry unavailable"));
  }
  EXPECT_EQ(AdmissionCount("mutate", "error"), 1);
  EXPECT_EQ(AdmissionCount("validate", "error"), 1);
}

// A replica that is not ready (a follower before its first list) plans
// nothing and answers 503, so the API server applies the failurePolicy; once
// ready it plans as ever.
TEST_F(AdmissionHandlerTest, NotReadyAnswers503WithoutPlanning) {
  bool ready = false;
  int decided = 0;
  AdmissionOptions options;
  options.ready = [&ready]() -> absl::Status {
    if (ready) return absl::OkStatus();
    return absl::UnavailableError("not the leader (leader: 10.0.0.2:7400)");
  };
  AdmissionHandler handler(
      [&](const monta::v1::StrategyRequest& request, bool record) {
        ++decided;
        return RegistryDecider(&registry_, nullptr)(request, record);
      },
      &metrics_, options);
  const json review = Review(Pod(MoeAnnotation(PaperSpec())));
  for (Operation op : {Operation::kMutate, Operation::kValidate}) {
    HttpReply reply = handler.Handle(op, review.dump());
    EXPECT_EQ(reply.status, 503);
    EXPECT_EQ(reply.content_type, "text/plain");
    EXPECT_TRUE(absl::StrContains(reply.body, "not ready to plan"))
        << reply.body;
    EXPECT_TRUE(absl::StrContains(reply.body, "10.0.0.2:7400")) << reply.body;
  }
  EXPECT_EQ(decided, 0);
  EXPECT_EQ(AdmissionCount("mutate", "error"), 1);
  ready = true;
  HttpReply reply = handler.Handle(Operation::kMutate, review.dump());
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(decided, 1);
  EXPECT_EQ(json::parse(reply.body)["response"]["allowed"], true);
}

TEST_F(AdmissionHandlerTest, MalformedReviewsGetHttp400) {
  const json good = Review(Pod(MoeAnnotation(PaperSpec())));
  json no_uid = good;
  no_uid["request"].erase("uid");
  json wrong_version = good;
  wrong_version["apiVersion"] = "admission.k8s.io/v1beta1";
  json no_object = good;
  no_object["request"].erase("object");
  json no_request = good;
  no_request.erase("request");
  for (const std::string& body :
       {std::string("not json"), std::string("[]"), no_uid.dump(),
        wrong_version.dump(), no_object.dump(), no_request.dump()}) {
    HttpReply reply = handler_->Handle(Operation::kMutate, body);
    EXPECT_EQ(reply.status, 400) << body;
    EXPECT_TRUE(absl::StartsWith(reply.body, "bad AdmissionReview"))
        << reply.body;
  }
  EXPECT_EQ(AdmissionCount("mutate", "error"), 6);
}

TEST_F(AdmissionHandlerTest, ValidSpecIsAllowedAndNotCountedAsDecision) {
  const json response =
      Send(Operation::kValidate, Review(Job(MoeAnnotation(PaperSpec()))));
  EXPECT_EQ(response["allowed"], true);
  EXPECT_FALSE(response.contains("patch"));
  EXPECT_FALSE(response.contains("status"));
  EXPECT_EQ(AdmissionCount("validate", "allowed"), 1);
  for (const auto& family : prom_.Collect()) {
    if (family.name == "monta_strategy_decisions_total") {
      // The series exist from the start (created up front); none was counted.
      for (const auto& metric : family.metric)
        EXPECT_EQ(metric.counter.value, 0);
    }
  }
}

// The example of deploy/README.md: no placement in the spec, the profile from
// the Job's monta.io/profile annotation.
TEST_F(AdmissionHandlerTest, DeployReadmeExampleIsPatched) {
  json annotations = {{"monta.io/profile", "h800-hgx"},
                      {"monta.io/moe", R"({"job": {"name": "mixtral-8x7b",
      "hidden_size": 4096, "num_experts": 8, "top_k": 2, "micro_batch_size": 1,
      "sequence_length": 4096, "bytes_per_element": 2, "moe_layers": 32,
      "world_size": 64, "tensor_parallel_size": 2, "expert_parallel_size": 8,
      "pipeline_parallel_size": 4, "data_parallel_size": 8}})"}};
  const json job = Job(annotations);
  EXPECT_EQ(Send(Operation::kValidate, Review(job))["allowed"], true);
  const json patched = Apply(Send(Operation::kMutate, Review(job)), job);
  const json decision =
      json::parse(patched["metadata"]["annotations"]["monta.io/decision"]
                      .get<std::string>());
  EXPECT_EQ(decision["placement"],
            json::parse(R"({"profile": "h800-hgx", "nodes": 8})"));
  EXPECT_NE(EnvValue(patched["spec"]["template"]["spec"]["containers"][0],
                     "MONTA_STRATEGY"),
            "<absent>");
}

TEST_F(AdmissionHandlerTest, DryRunIsPatchedButNotCountedAsDecision) {
  json review = Review(Pod(MoeAnnotation(PaperSpec())));
  review["request"]["dryRun"] = true;
  const json response = Send(Operation::kMutate, review);
  EXPECT_TRUE(response.contains("patch"));
  EXPECT_EQ(AdmissionCount("mutate", "patched"), 1);
  for (const auto& family : prom_.Collect()) {
    if (family.name == "monta_strategy_decisions_total") {
      // The series exist from the start (created up front); none was counted.
      for (const auto& metric : family.metric)
        EXPECT_EQ(metric.counter.value, 0);
    }
  }
}

// A spec that names its nodes is priced on the planner's fabric tree as
// GetStrategy prices it (docs/MODEL.md §12): the decider reads the tree for
// it, and only for it (a profile placement has no nodes to place, and its
// evidence says the uplinks are left out).
TEST_F(AdmissionHandlerTest, NamedNodesArePricedOnTheFabricTree) {
  RegisterH800("gpu-b", "i-2");
  monta::v1::FabricReply tree;
  monta::v1::FabricBlock* block = tree.add_blocks();
  for (const char* node : {"gpu-a", "gpu-b"}) {
    monta::v1::FabricRack* rack = block->add_racks();
    rack->set_name(std::string("rack-of-") + node);
    rack->mutable_uplink()->set_declared_bytes_per_second(1e9);
    rack->add_nodes()->set_name(node);
  }
  int reads = 0;
  AdmissionHandler::Decider decide =
      RegistryDecider(&registry_, &metrics_, nullptr, nullptr,
                      [&]() -> std::optional<monta::v1::FabricReply> {
                        ++reads;
                        return tree;
                      });
  monta::v1::StrategyRequest request = testing::PaperJobRequest();
  request.mutable_placement()->Clear();
  request.mutable_placement()->add_node_names("gpu-a");
  request.mutable_placement()->add_node_names("gpu-b");
  absl::StatusOr<monta::v1::StrategyReply> named = decide(request, false);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(reads, 1);
  ASSERT_GT(named->evidence().fabric().uplinks_size(), 0)
      << named->evidence().DebugString();
  EXPECT_TRUE(named->evidence().fabric().uplinks(0).declared());
  EXPECT_TRUE(named->has_rank_order());
  EXPECT_TRUE(named->chosen().has_fabric_bound());

  absl::StatusOr<monta::v1::StrategyReply> by_profile =
      decide(testing::PaperJobRequest(), false);
  ASSERT_TRUE(by_profile.ok()) << by_profile.status();
  EXPECT_EQ(reads, 1);
  EXPECT_FALSE(by_profile->has_rank_order());
  bool noted = false;
  for (const std::string& n : by_profile->evidence().notes()) {
    noted |= absl::StartsWith(n, "fabric: not priced: the placement names no");
  }
  EXPECT_TRUE(noted) << by_profile->evidence().DebugString();
}

TEST(EscapeJsonPointerTest, EscapesTildeAndSlash) {
  EXPECT_EQ(EscapeJsonPointer("monta.io/decision"), "monta.io~1decision");
  EXPECT_EQ(EscapeJsonPointer("a~b/c"), "a~0b~1c");
  EXPECT_EQ(EscapeJsonPointer("plain"), "plain");
}

}  // namespace
}  // namespace monta::admission
