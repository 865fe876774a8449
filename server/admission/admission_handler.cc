#include "server/admission/admission_handler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/optional.h"
#include "common/echo.h"
#include "common/job_file.h"
#include "common/proto_names.h"
#include "nlohmann/json.hpp"
#include "server/planning/decide_strategy.h"
#include "server/planning/request_validation.h"
#include "server/planning/strategy_planner.h"

namespace monta::admission {
namespace {

using json = nlohmann::json;

constexpr char kReviewApiVersion[] = "admission.k8s.io/v1";

// A spec the user must fix: HTTP-style code (400 malformed, 422 impossible) and
// a message naming the field.
struct SpecError {
  int code = 422;
  std::string message;
};

std::string Truncate(std::string s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  s.resize(max_chars - 3);
  return s + "...";
}

// Six significant digits: enough for a prediction, short in an annotation.
double Round6(double v) {
  if (!std::isfinite(v)) return 0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return std::strtod(buf, nullptr);
}

std::string FormatNumber(double v) { return absl::StrFormat("%.6g", v); }

std::string RandomUuid() {
  thread_local absl::BitGen gen;
  const uint64_t hi = absl::Uniform<uint64_t>(gen);
  const uint64_t lo = absl::Uniform<uint64_t>(gen);
  // Version 4, variant 10xx.
  return absl::StrFormat(
      "%08x-%04x-4%03x-%04x-%012x", hi >> 32, (hi >> 16) & 0xffff, hi & 0x0fff,
      0x8000 | ((lo >> 48) & 0x3fff), lo & 0xffffffffffffULL);
}

// The member `key` of `j` if `j` is an object that has it, else nullptr.
const json* Member(const json* j, const char* key) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(key);
  return it == j->end() ? nullptr : &*it;
}

std::string StringMember(const json* j, const char* key) {
  const json* m = Member(j, key);
  return m != nullptr && m->is_string() ? m->get<std::string>() : std::string();
}

}  // namespace

const char* OperationName(Operation op) {
  return op == Operation::kMutate ? "mutate" : "validate";
}

std::string EscapeJsonPointer(absl::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

HttpReply BadReview(const std::string& message) {
  HttpReply reply;
  reply.status = 400;
  reply.content_type = "text/plain; charset=utf-8";
  reply.body = absl::StrCat("bad AdmissionReview: ", message, "\n");
  return reply;
}

json ReviewResponse(const json& uid) {
  json review = {{"apiVersion", kReviewApiVersion},
                 {"kind", "AdmissionReview"}};
  review["response"] = {{"uid", uid}, {"allowed", true}};
  return review;
}

HttpReply Json200(const json& review) {
  HttpReply reply;
  // Messages may quote bytes of the request cut inside a UTF-8 character (a
  // parse error's "last read", a truncated warning); dump() would throw on
  // them, so they become U+FFFD instead.
  reply.body = review.dump(-1, ' ', false, json::error_handler_t::replace);
  return reply;
}

// Strips nlohmann's "[json.exception.parse_error.101] " prefix.
std::string ParseErrorText(const std::string& what) {
  const size_t close = what.find("] ");
  return CutMessage(close == std::string::npos ? what : what.substr(close + 2));
}

// The placement the spec gives, completed: a profile placement without `nodes`
// gets job.world_size / GPUs per node; no placement at all takes the profile
// from the annotation monta.io/profile.
absl::optional<SpecError> CompletePlacement(
    const json* annotations, const std::map<std::string, int>& profile_gpus,
    monta::v1::StrategyRequest* request) {
  monta::v1::Placement* p = request->mutable_placement();
  std::string from = "placement.profile";
  if (p->node_names_size() == 0 && p->profile().empty()) {
    const std::string profile = StringMember(annotations, kProfileAnnotation);
    if (profile.empty()) {
      return SpecError{
          422,
          absl::StrCat(
              "placement: required: add \"placement\": {\"profile\": "
              "\"<profile>\", \"nodes\": N} or {\"node_names\": [...]} to ",
              kMoeAnnotation, ", or annotate the object with ",
              kProfileAnnotation, ": <profile>")};
    }
    p->set_profile(profile);
    from = kProfileAnnotation;
  }
  if (p->node_names_size() > 0 || p->nodes() != 0) return absl::nullopt;
  auto it = profile_gpus.find(p->profile());
  if (it == profile_gpus.end()) {
    std::string known;
    for (const auto& [name, gpus] : profile_gpus) {
      absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    }
    return SpecError{
        422, absl::StrCat(from, ": unknown profile ", EchoInput(p->profile()),
                          "; expected one of ", known)};
  }
  const int gpus = p->gpus_per_node() > 0 ? p->gpus_per_node() : it->second;
  const int world = request->job().world_size();
  if (gpus <= 0 || world % gpus != 0) {
    return SpecError{
        422, absl::StrCat("placement.nodes: not given, and job.world_size (",
                          world, ") is not a multiple of the ", gpus,
                          " GPUs per node of profile ", EchoInput(p->profile()),
                          "; give placement.nodes and "
                          "placement.gpus_per_node")};
  }
  p->set_nodes(world / gpus);
  return absl::nullopt;
}

// Whether the planner's error is the spec's fault (then the user can fix it).
bool IsSpecError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

json PlacementJson(const monta::v1::Placement& p) {
  json out = json::object();
  if (p.node_names_size() > 0) {
    out["node_names"] =
        std::vector<std::string>(p.node_names().begin(), p.node_names().end());
  } else {
    out["profile"] = p.profile();
    out["nodes"] = p.nodes();
  }
  if (p.gpus_per_node() > 0) out["gpus_per_node"] = p.gpus_per_node();
  return out;
}

json DecisionJson(const std::string& id,
                  const monta::v1::StrategyRequest& request,
                  const monta::v1::StrategyReply& reply, absl::Time now) {
  const monta::v1::Candidate& c = reply.chosen();
  json evidence = {{"source", ShortName(reply.evidence().origin())}};
  if (!reply.evidence().profile().empty()) {
    evidence["profile"] = reply.evidence().profile();
    evidence["profile_version"] = reply.evidence().profile_version();
  }
  json curves = json::array();
  for (const monta::v1::CurveEvidence& e : reply.evidence().curves()) {
    json curve = {{"role", ShortName(e.used_as())},
                  {"source", ShortName(e.origin())},
                  {"age_seconds", Round6(e.age_seconds())}};
    if (e.nodes_size() > 0) {
      curve["nodes"] =
          std::vector<std::string>(e.nodes().begin(), e.nodes().end());
    }
    if (e.extrapolated()) curve["extrapolated"] = true;
    curves.push_back(std::move(curve));
  }
  evidence["curves"] = std::move(curves);
  return {
      {"id", id},
      {"decided_at",
       absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", now, absl::UTCTimeZone())},
      {"job", request.job().name()},
      {"strategy", ShortName(c.kind())},
      {"chunks", c.chunks_effective()},
      {"chunks_requested", c.chunks_requested()},
      {"predicted_alltoall_seconds_per_layer",
       Round6(c.total_seconds_per_layer())},
      {"predicted_alltoall_seconds_per_step", Round6(c.step_seconds())},
      {"speedup_over_flat", Round6(c.speedup_over_flat())},
      {"bottleneck", ShortName(c.limited_by())},
      {"expert_layout", ShortName(reply.expert_layout())},
      // The job left its layout to the planner's default (docs/MODEL.md §4).
      {"expert_layout_defaulted", !request.job().has_experts_tensor_parallel()},
      {"placement", PlacementJson(request.placement())},
      {"evidence", std::move(evidence)},
  };
}

// The env vars the launcher reads, in a fixed order.
std::vector<std::pair<std::string, std::string>> DecisionEnv(
    const std::string& id, const monta::v1::StrategyReply& reply) {
  const monta::v1::Candidate& c = reply.chosen();
  return {
      {"MONTA_STRATEGY", ShortName(c.kind())},
      {"MONTA_NUM_CHUNKS", absl::StrCat(std::max(1, c.chunks_effective()))},
      {"MONTA_PREDICTED_ALLTOALL_SECONDS",
       FormatNumber(c.total_seconds_per_layer())},
      {"MONTA_PREDICTED_STEP_ALLTOALL_SECONDS", FormatNumber(c.step_seconds())},
      {"MONTA_SPEEDUP_OVER_FLAT", FormatNumber(c.speedup_over_flat())},
      {"MONTA_EVIDENCE_SOURCE", ShortName(reply.evidence().origin())},
      {"MONTA_EXPERT_LAYOUT", ShortName(reply.expert_layout())},
      {"MONTA_DECISION_ID", id},
  };
}

// RFC 6902 operations that set `env` in every container and init container of
// the pod spec at `pod_spec_pointer`.
void AddEnvOps(const json& pod_spec, const std::string& pod_spec_pointer,
               const std::vector<std::pair<std::string, std::string>>& env,
               json* ops) {
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = Member(&pod_spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (size_t i = 0; i < containers->size(); ++i) {
      const std::string base =
          absl::StrCat(pod_spec_pointer, "/", list, "/", i, "/env");
      const json* existing = Member(&(*containers)[i], "env");
      if (existing == nullptr || !existing->is_array()) {
        // Absent (or null): one op creates the whole array.
        json vars = json::array();
        for (const auto& [name, value] : env)
          vars.push_back({{"name", name}, {"value", value}});
        ops->push_back(
            {{"op", "add"}, {"path", base}, {"value", std::move(vars)}});
        continue;
      }
      for (const auto& [name, value] : env) {
        bool replaced = false;
        for (size_t j = 0; j < existing->size(); ++j) {
          if (StringMember(&(*existing)[j], "name") != name) continue;
          ops->push_back({{"op", "replace"},
                          {"path", absl::StrCat(base, "/", j)},
                          {"value", {{"name", name}, {"value", value}}}});
          replaced = true;
        }
        if (!replaced) {
          ops->push_back({{"op", "add"},
                          {"path", base + "/-"},
                          {"value", {{"name", name}, {"value", value}}}});
        }
      }
    }
  }
}

// Ops that set `annotations` under the metadata at `metadata_pointer` (whose
// current value is `metadata`, possibly null), creating what is missing.
void AddAnnotationOps(const json* metadata, const std::string& metadata_pointer,
                      const json& annotations, json* ops) {
  if (metadata == nullptr || !metadata->is_object()) {
    ops->push_back({{"op", "add"},
                    {"path", metadata_pointer},
                    {"value", {{"annotations", annotations}}}});
    return;
  }
  const json* existing = Member(metadata, "annotations");
  if (existing == nullptr || !existing->is_object()) {
    ops->push_back({{"op", "add"},
                    {"path", metadata_pointer + "/annotations"},
                    {"value", annotations}});
    return;
  }
  for (const auto& [key, value] : annotations.items()) {
    // "add" on an existing member replaces it (RFC 6902 4.1).
    ops->push_back({{"op", "add"},
                    {"path", absl::StrCat(metadata_pointer, "/annotations/",
                                          EscapeJsonPointer(key))},
                    {"value", value}});
  }
}

}  // namespace

AdmissionHandler::AdmissionHandler(Decider decide,
                                   metrics::PlannerMetrics* metrics,
                                   AdmissionOptions options)
    : decide_(std::move(decide)),
      metrics_(metrics),
      options_(std::move(options)) {
  if (!options_.new_decision_id) options_.new_decision_id = RandomUuid;
  if (!options_.now) options_.now = [] { return absl::Now(); };
  for (const monta::v1::HardwareProfile& p : planning::ListProfiles()) {
    profile_gpus_[p.name()] = p.gpus_per_node();
  }
}

HttpReply AdmissionHandler::Handle(Operation op, absl::string_view body) const {
  const auto start = std::chrono::steady_clock::now();
  ReviewOutcome outcome;
  absl::Status ready = options_.ready ? options_.ready() : absl::OkStatus();
  try {
    if (!ready.ok()) {
      outcome.reply.status = 503;
      outcome.reply.content_type = "text/plain";
      outcome.reply.body = absl::StrCat(
          "monta-planner: not ready to plan: ", ready.message(), "\n");
      outcome.result = "error";
    } else {
      outcome = Review(op, body);
    }
  } catch (const std::exception& e) {
    // Only a bug gets here (the review is read defensively); never crash the
    // planner over one review.
    outcome.reply = BadReview(absl::StrCat("internal error: ", e.what()));
    outcome.reply.status = 500;
    outcome.result = "error";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (metrics_ != nullptr)
    metrics_->RecordAdmission(OperationName(op), outcome.result, seconds);
  return outcome.reply;
}

void AdmissionHandler::RecordRefused(Operation op) const {
  if (metrics_ != nullptr)
    metrics_->RecordAdmission(OperationName(op), "error", 0);
}

namespace {

// The object under review, once the AdmissionReview is read.
struct ReviewedObject {
  bool is_pod = false;  // else a batch/v1 Job
  bool dry_run = false;
  const json* object = nullptr;
  const json* metadata = nullptr;
  const json* annotations = nullptr;
  const json* spec_text = nullptr;  // the monta.io/moe annotation
  std::string name;                 // namespace/name, for the log
};

// The envelope: apiVersion, kind and request.uid. An error is a malformed
// review (HTTP 400).
absl::Status CheckEnvelope(const json& review) {
  if (review.is_discarded() || !review.is_object()) {
    return absl::InvalidArgumentError("body is not a JSON object");
  }
  if (StringMember(&review, "apiVersion") != kReviewApiVersion ||
      StringMember(&review, "kind") != "AdmissionReview") {
    return absl::InvalidArgumentError(
        absl::StrCat("expected apiVersion ", kReviewApiVersion,
                     " and kind AdmissionReview"));
  }
  const json* uid = Member(Member(&review, "request"), "uid");
  if (uid == nullptr || !uid->is_string() || uid->get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        "request.uid: expected a non-empty string");
  }
  return absl::OkStatus();
}

// The object the webhook acts on: a CREATE of a v1 Pod or batch/v1 Job that
// carries monta.io/moe and no decision yet. nullopt for everything else, which
// passes untouched; an error for such a CREATE without an object.
absl::StatusOr<absl::optional<ReviewedObject>> FindObject(const json& request) {
  const json* kind = Member(&request, "kind");
  const std::string group = StringMember(kind, "group");
  const std::string kind_name = StringMember(kind, "kind");
  const bool is_pod = group.empty() && kind_name == "Pod";
  const bool is_job = group == "batch" && kind_name == "Job";
  const std::string operation = StringMember(&request, "operation");
  if ((!is_pod && !is_job) || (!operation.empty() && operation != "CREATE")) {
    return absl::nullopt;
  }
  ReviewedObject o;
  o.is_pod = is_pod;
  const json* dry_run = Member(&request, "dryRun");
  o.dry_run =
      dry_run != nullptr && dry_run->is_boolean() && dry_run->get<bool>();
  o.object = Member(&request, "object");
  if (o.object == nullptr || !o.object->is_object()) {
    return absl::InvalidArgumentError(
        "request.object: expected the Pod or Job being created");
  }
  o.metadata = Member(o.object, "metadata");
  o.annotations = Member(o.metadata, "annotations");
  o.spec_text = Member(o.annotations, kMoeAnnotation);
  if (o.spec_text == nullptr ||
      Member(o.annotations, kDecisionAnnotation) != nullptr) {
    return absl::nullopt;
  }
  const std::string name = StringMember(o.metadata, "name");
  o.name = absl::StrCat(
      StringMember(&request, "namespace"), "/",
      name.empty() ? StringMember(o.metadata, "generateName") : name);
  return o;
}

// The monta.io/moe text as a request whose placement is complete, or what is
// wrong with it (400 malformed, 422 impossible).
absl::optional<SpecError> ParseSpec(
    const json& spec_text, const json* annotations,
    const std::map<std::string, int>& profile_gpus,
    monta::v1::StrategyRequest* request) {
  if (!spec_text.is_string()) {
    return SpecError{400, absl::StrCat(kMoeAnnotation, ": expected a string")};
  }
  const std::string text = spec_text.get<std::string>();
  try {
    if (!json::parse(text).is_object()) {
      return SpecError{
          400, absl::StrCat(kMoeAnnotation,
                            ": expected a JSON object {\"job\": {...}, "
                            "\"placement\": {...}, \"options\": {...}}")};
    }
  } catch (const json::parse_error& e) {
    return SpecError{400, absl::StrCat(kMoeAnnotation, ": not valid JSON: ",
                                       ParseErrorText(e.what()))};
  }
  absl::StatusOr<monta::v1::StrategyRequest> parsed =
      ParseJobFile(text, JobFileFormat::kJson);
  if (!parsed.ok())
    return SpecError{400, std::string(parsed.status().message())};
  *request = *std::move(parsed);
  // Job errors first (they name job.* fields), then the placement.
  if (absl::Status s = planning::ValidateJob(request->job()); !s.ok()) {
    return SpecError{422, std::string(s.message())};
  }
  return CompletePlacement(annotations, profile_gpus, request);
}

// The spec and the planner's answer. At most one of spec_error and
// planner_error is set; with neither, `reply` chose a feasible strategy.
struct SpecPlan {
  monta::v1::StrategyRequest request;
  monta::v1::StrategyReply reply;
  absl::optional<SpecError> spec_error;
  absl::Status planner_error;
};

// A planner answer without a feasible strategy, as the user's error.
SpecError NoStrategy(const monta::v1::StrategyReply& reply) {
  std::string reasons;
  for (const monta::v1::Candidate& c : reply.candidates()) {
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", ShortName(c.kind()),
                    ": ", c.infeasible_reason());
  }
  return SpecError{422, absl::StrCat("no AllToAll strategy can run this job (",
                                     reasons, ")")};
}

SpecPlan PlanSpec(const ReviewedObject& o,
                  const std::map<std::string, int>& profile_gpus,
                  const AdmissionHandler::Decider& decide,
                  bool record_decision) {
  SpecPlan plan;
  plan.spec_error =
      ParseSpec(*o.spec_text, o.annotations, profile_gpus, &plan.request);
  if (!plan.spec_error.has_value()) {
    absl::StatusOr<monta::v1::StrategyReply> decided =
        decide(plan.request, record_decision);
    if (!decided.ok() && IsSpecError(decided.status())) {
      plan.spec_error = SpecError{422, std::string(decided.status().message())};
    } else if (!decided.ok()) {
      plan.planner_error = decided.status();
    } else if (!decided->chosen().feasible() ||
               decided->chosen().kind() ==
                   monta::v1::STRATEGY_KIND_UNSPECIFIED) {
      plan.spec_error = NoStrategy(*decided);
    } else {
      plan.reply = *std::move(decided);
    }
  }
  if (plan.spec_error.has_value() &&
      !absl::StartsWith(plan.spec_error->message, kMoeAnnotation)) {
    plan.spec_error->message =
        absl::StrCat(kMoeAnnotation, ": ", plan.spec_error->message);
  }
  return plan;
}

ReviewOutcome Answer(json response, std::string result) {
  return {Json200(response), std::move(result)};
}

// Not the spec's fault: admit unchanged (as failurePolicy Ignore would) and
// say so.
ReviewOutcome PlannerErrorAnswer(const absl::Status& error, json response) {
  response["response"]["warnings"] = {Truncate(
      absl::StrCat("monta planner could not decide (", error.message(),
                   "); admitted without a Monta strategy (the launcher uses "
                   "its default AllToAll)"),
      kMaxWarningChars)};
  return Answer(std::move(response), "error");
}

ReviewOutcome ValidationAnswer(const absl::optional<SpecError>& spec_error,
                               json response) {
  if (!spec_error.has_value()) return Answer(std::move(response), "allowed");
  response["response"]["allowed"] = false;
  response["response"]["status"] = {
      {"status", "Failure"},
      {"code", spec_error->code},
      {"reason", spec_error->code == 400 ? "BadRequest" : "Invalid"},
      {"message", spec_error->message}};
  return Answer(std::move(response), "denied");
}

// The JSONPatch that records the decision on the object: env vars in every
// container, annotations on the object (and on a Job's Pod template, so the
// webhook leaves its Pods as they are).
json DecisionPatch(
    const ReviewedObject& o, const json& new_annotations,
    const std::vector<std::pair<std::string, std::string>>& env) {
  json ops = json::array();
  if (o.is_pod) {
    const json* pod_spec = Member(o.object, "spec");
    if (pod_spec != nullptr) AddEnvOps(*pod_spec, "/spec", env, &ops);
    AddAnnotationOps(o.metadata, "/metadata", new_annotations, &ops);
    return ops;
  }
  const json* tmpl = Member(Member(o.object, "spec"), "template");
  const json* pod_spec = Member(tmpl, "spec");
  if (pod_spec != nullptr)
    AddEnvOps(*pod_spec, "/spec/template/spec", env, &ops);
  AddAnnotationOps(o.metadata, "/metadata", new_annotations, &ops);
  if (tmpl != nullptr && tmpl->is_object()) {
    AddAnnotationOps(Member(tmpl, "metadata"), "/spec/template/metadata",
                     new_annotations, &ops);
  }
  return ops;
}

ReviewOutcome MutationAnswer(const ReviewedObject& o, const SpecPlan& plan,
                             const AdmissionOptions& options, json response) {
  if (plan.spec_error.has_value()) {
    // The validating webhook denies it with the same message; admitting here
    // keeps the two webhooks' jobs apart.
    response["response"]["warnings"] = {Truncate(
        absl::StrCat(plan.spec_error->message, " (no Monta strategy applied)"),
        kMaxWarningChars)};
    return Answer(std::move(response), "allowed");
  }
  const monta::v1::Candidate& c = plan.reply.chosen();
  const std::string id = options.new_decision_id();
  const json decision =
      DecisionJson(id, plan.request, plan.reply, options.now());
  const json new_annotations = {{kStrategyAnnotation, ShortName(c.kind())},
                                {kDecisionIdAnnotation, id},
                                {kDecisionAnnotation, decision.dump()}};
  const json ops =
      DecisionPatch(o, new_annotations, DecisionEnv(id, plan.reply));
  response["response"]["patchType"] = "JSONPatch";
  response["response"]["patch"] = absl::Base64Escape(ops.dump());
  if (options.log && !o.dry_run) {
    options.log(absl::StrCat(
        "admission: ", o.is_pod ? "Pod " : "Job ", o.name, " decision ", id,
        ": ", ShortName(c.kind()), " chunks=", c.chunks_effective(),
        " predicted_alltoall_seconds_per_layer=",
        FormatNumber(c.total_seconds_per_layer()),
        " speedup_over_flat=", FormatNumber(c.speedup_over_flat()),
        " evidence=", ShortName(plan.reply.evidence().origin())));
  }
  return Answer(std::move(response), "patched");
}

}  // namespace

// Read the review, plan the spec, answer: each step in its own function above.
ReviewOutcome AdmissionHandler::Review(Operation op,
                                       absl::string_view body) const {
  const json review = json::parse(body.begin(), body.end(), nullptr,
                                  /*allow_exceptions=*/false);
  if (absl::Status s = CheckEnvelope(review); !s.ok()) {
    return {BadReview(std::string(s.message())), "error"};
  }
  const json& request = review["request"];
  json response = ReviewResponse(request["uid"]);
  absl::StatusOr<absl::optional<ReviewedObject>> object = FindObject(request);
  if (!object.ok()) {
    return {BadReview(std::string(object.status().message())), "error"};
  }
  if (!object->has_value()) return Answer(std::move(response), "skipped");
  const ReviewedObject& o = **object;
  // A dry run (kubectl --dry-run=server) is answered the same way but is
  // neither counted as a decision nor logged.
  const SpecPlan plan = PlanSpec(o, profile_gpus_, decide_,
                                 op == Operation::kMutate && !o.dry_run);
  if (!plan.planner_error.ok()) {
    return PlannerErrorAnswer(plan.planner_error, std::move(response));
  }
  if (op == Operation::kValidate) {
    return ValidationAnswer(plan.spec_error, std::move(response));
  }
  return MutationAnswer(o, plan, options_, std::move(response));
}

AdmissionHandler::Decider RegistryDecider(
    const registry::Registry* registry, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions, const planning::PlanKnowledge* knowledge,
    planning::FabricTreeSource fabric_tree) {
  return [registry, metrics, decisions, knowledge,
          fabric_tree = std::move(fabric_tree)](
             const monta::v1::StrategyRequest& request, bool record_decision) {
    // A spec that names its nodes is priced on the fabric tree as
    // GetStrategy prices it (docs/MODEL.md §12); a profile placement has no
    // nodes to place, and its evidence says so.
    std::optional<monta::v1::FabricReply> tree;
    if (fabric_tree && request.placement().node_names_size() > 0) {
      tree = fabric_tree();
    }
    absl::StatusOr<monta::v1::StrategyReply> reply = planning::DecideStrategy(
        request, registry, record_decision ? metrics : nullptr,
        record_decision ? decisions : nullptr, knowledge,
        tree ? &*tree : nullptr);
    if (reply.ok() && fabric_tree &&
        request.placement().node_names_size() == 0) {
      reply->mutable_evidence()->add_notes(
          "fabric: not priced: the placement names no nodes (a profile), so "
          "the planner's rack and spine uplinks are left out; a spec with "
          "placement.node_names, or the job asking with its real hosts "
          "(monta.plan_on_nodes), gets them priced and a rank order "
          "(docs/MODEL.md §10, §12)");
    }
    return reply;
  };
}

}  // namespace monta::admission
