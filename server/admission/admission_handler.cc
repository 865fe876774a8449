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
#include "nlohmann/json.hpp"
#include "server/api/planner_service.h"
#include "server/planning/job_file.h"
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

struct AdmissionHandler::Outcome {
  HttpReply reply;
  std::string result;  // metrics label
};

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
  reply.body = review.dump();
  return reply;
}

// Strips nlohmann's "[json.exception.parse_error.101] " prefix.
std::string ParseErrorText(const std::string& what) {
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
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
    return SpecError{422,
                     absl::StrCat(from, ": unknown profile \"", p->profile(),
                                  "\"; expected one of ", known)};
  }
  const int gpus = p->gpus_per_node() > 0 ? p->gpus_per_node() : it->second;
  const int world = request->job().world_size();
  if (gpus <= 0 || world % gpus != 0) {
    return SpecError{
        422, absl::StrCat("placement.nodes: not given, and job.world_size (",
                          world, ") is not a multiple of the ", gpus,
                          " GPUs per node of profile \"", p->profile(),
                          "\"; give placement.nodes and "
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
  json evidence = {{"source", reply.evidence().source()}};
  if (!reply.evidence().profile().empty()) {
    evidence["profile"] = reply.evidence().profile();
    evidence["profile_version"] = reply.evidence().profile_version();
  }
  json curves = json::array();
  for (const monta::v1::CurveEvidence& e : reply.evidence().curves()) {
    json curve = {{"role", e.role()},
                  {"source", e.source()},
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
      {"strategy", c.name()},
      {"chunks", c.chunks_effective()},
      {"chunks_requested", c.chunks_requested()},
      {"predicted_alltoall_seconds_per_layer",
       Round6(c.total_seconds_per_layer())},
      {"predicted_alltoall_seconds_per_step", Round6(c.step_seconds())},
      {"speedup_over_flat", Round6(c.speedup_over_flat())},
      {"bottleneck", c.bottleneck()},
      {"placement", PlacementJson(request.placement())},
      {"evidence", std::move(evidence)},
  };
}

// The env vars the launcher reads, in a fixed order.
std::vector<std::pair<std::string, std::string>> DecisionEnv(
    const std::string& id, const monta::v1::StrategyReply& reply) {
  const monta::v1::Candidate& c = reply.chosen();
  return {
      {"MONTA_STRATEGY", c.name()},
      {"MONTA_NUM_CHUNKS", absl::StrCat(std::max(1, c.chunks_effective()))},
      {"MONTA_PREDICTED_ALLTOALL_SECONDS",
       FormatNumber(c.total_seconds_per_layer())},
      {"MONTA_PREDICTED_STEP_ALLTOALL_SECONDS", FormatNumber(c.step_seconds())},
      {"MONTA_SPEEDUP_OVER_FLAT", FormatNumber(c.speedup_over_flat())},
      {"MONTA_EVIDENCE_SOURCE", reply.evidence().source()},
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
  Outcome outcome;
  try {
    outcome = Review(op, body);
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

AdmissionHandler::Outcome AdmissionHandler::Review(
    Operation op, absl::string_view body) const {
  Outcome out;
  out.result = "error";
  const json review = json::parse(body.begin(), body.end(), nullptr,
                                  /*allow_exceptions=*/false);
  if (review.is_discarded() || !review.is_object()) {
    out.reply = BadReview("body is not a JSON object");
    return out;
  }
  if (StringMember(&review, "apiVersion") != kReviewApiVersion ||
      StringMember(&review, "kind") != "AdmissionReview") {
    out.reply =
        BadReview(absl::StrCat("expected apiVersion ", kReviewApiVersion,
                               " and kind AdmissionReview"));
    return out;
  }
  const json* request = Member(&review, "request");
  const json* uid = Member(request, "uid");
  if (uid == nullptr || !uid->is_string() || uid->get<std::string>().empty()) {
    out.reply = BadReview("request.uid: expected a non-empty string");
    return out;
  }
  json response = ReviewResponse(*uid);
  json& answer = response["response"];

  // Only CREATE of v1 Pods and batch/v1 Jobs; everything else passes untouched.
  const json* kind = Member(request, "kind");
  const std::string group = StringMember(kind, "group");
  const std::string kind_name = StringMember(kind, "kind");
  const bool is_pod = group.empty() && kind_name == "Pod";
  const bool is_job = group == "batch" && kind_name == "Job";
  const std::string operation = StringMember(request, "operation");
  const json* dry_run_member = Member(request, "dryRun");
  const bool dry_run = dry_run_member != nullptr &&
                       dry_run_member->is_boolean() &&
                       dry_run_member->get<bool>();
  if ((!is_pod && !is_job) || (!operation.empty() && operation != "CREATE")) {
    out.result = "skipped";
    out.reply = Json200(response);
    return out;
  }
  const json* object = Member(request, "object");
  if (object == nullptr || !object->is_object()) {
    out.reply =
        BadReview("request.object: expected the Pod or Job being created");
    return out;
  }
  const json* metadata = Member(object, "metadata");
  const json* annotations = Member(metadata, "annotations");
  const json* spec_text = Member(annotations, kMoeAnnotation);
  if (spec_text == nullptr ||
      Member(annotations, kDecisionAnnotation) != nullptr) {
    out.result = "skipped";
    out.reply = Json200(response);
    return out;
  }
  const std::string object_name =
      absl::StrCat(StringMember(request, "namespace"), "/",
                   StringMember(metadata, "name").empty()
                       ? StringMember(metadata, "generateName")
                       : StringMember(metadata, "name"));

  // The spec, the placement and the planner's answer; any failure is either the
  // spec's fault (SpecError) or the planner's (planner_error).
  absl::optional<SpecError> spec_error;
  absl::Status planner_error;
  monta::v1::StrategyRequest plan_request;
  absl::StatusOr<monta::v1::StrategyReply> decided;
  if (!spec_text->is_string()) {
    spec_error =
        SpecError{400, absl::StrCat(kMoeAnnotation, ": expected a string")};
  } else {
    const std::string text = spec_text->get<std::string>();
    try {
      if (!json::parse(text).is_object()) {
        spec_error = SpecError{
            400, absl::StrCat(kMoeAnnotation,
                              ": expected a JSON object {\"job\": {...}, "
                              "\"placement\": {...}, \"options\": {...}}")};
      }
    } catch (const json::parse_error& e) {
      spec_error = SpecError{
          400, absl::StrCat(kMoeAnnotation,
                            ": not valid JSON: ", ParseErrorText(e.what()))};
    }
    if (!spec_error.has_value()) {
      absl::StatusOr<monta::v1::StrategyRequest> parsed =
          planning::ParseJobFile(text, planning::JobFileFormat::kJson);
      if (!parsed.ok()) {
        spec_error = SpecError{400, std::string(parsed.status().message())};
      } else {
        plan_request = *std::move(parsed);
      }
    }
    if (!spec_error.has_value()) {
      // Job errors first (they name job.* fields), then the placement.
      if (absl::Status s = planning::ValidateJob(plan_request.job()); !s.ok()) {
        spec_error = SpecError{422, std::string(s.message())};
      } else {
        spec_error =
            CompletePlacement(annotations, profile_gpus_, &plan_request);
      }
    }
    if (!spec_error.has_value()) {
      // A dry run (kubectl --dry-run=server) is answered the same way but is
      // neither counted as a decision nor logged.
      decided = decide_(plan_request, op == Operation::kMutate && !dry_run);
      if (!decided.ok()) {
        if (IsSpecError(decided.status())) {
          spec_error = SpecError{422, std::string(decided.status().message())};
        } else {
          planner_error = decided.status();
        }
      } else if (!decided->chosen().feasible() ||
                 decided->chosen().kind() ==
                     monta::v1::STRATEGY_KIND_UNSPECIFIED) {
        std::string reasons;
        for (const monta::v1::Candidate& c : decided->candidates()) {
          absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", c.name(), ": ",
                          c.infeasible_reason());
        }
        spec_error = SpecError{
            422, absl::StrCat("no AllToAll strategy can run this job (",
                              reasons, ")")};
      }
    }
  }
  if (spec_error.has_value() &&
      !absl::StartsWith(spec_error->message, kMoeAnnotation)) {
    spec_error->message =
        absl::StrCat(kMoeAnnotation, ": ", spec_error->message);
  }

  if (!planner_error.ok()) {
    // Not the spec's fault: admit unchanged (as failurePolicy Ignore would) and
    // say so.
    out.result = "error";
    answer["warnings"] = {
        Truncate(absl::StrCat("monta planner could not decide (",
                              planner_error.message(),
                              "); admitted without a Monta strategy (the "
                              "launcher uses its default "
                              "AllToAll)"),
                 kMaxWarningChars)};
    out.reply = Json200(response);
    return out;
  }

  if (op == Operation::kValidate) {
    if (spec_error.has_value()) {
      out.result = "denied";
      answer["allowed"] = false;
      answer["status"] = {
          {"status", "Failure"},
          {"code", spec_error->code},
          {"reason", spec_error->code == 400 ? "BadRequest" : "Invalid"},
          {"message", spec_error->message}};
    } else {
      out.result = "allowed";
    }
    out.reply = Json200(response);
    return out;
  }

  // Mutate.
  if (spec_error.has_value()) {
    // The validating webhook denies it with the same message; admitting here
    // keeps the two webhooks' jobs apart.
    out.result = "allowed";
    answer["warnings"] = {Truncate(
        absl::StrCat(spec_error->message, " (no Monta strategy applied)"),
        kMaxWarningChars)};
    out.reply = Json200(response);
    return out;
  }
  const std::string id = options_.new_decision_id();
  const absl::Time now = options_.now();
  const json decision = DecisionJson(id, plan_request, *decided, now);
  const json new_annotations = {{kStrategyAnnotation, decided->chosen().name()},
                                {kDecisionIdAnnotation, id},
                                {kDecisionAnnotation, decision.dump()}};
  const auto env = DecisionEnv(id, *decided);
  json ops = json::array();
  if (is_pod) {
    const json* pod_spec = Member(object, "spec");
    if (pod_spec != nullptr) AddEnvOps(*pod_spec, "/spec", env, &ops);
    AddAnnotationOps(metadata, "/metadata", new_annotations, &ops);
  } else {
    const json* tmpl = Member(Member(object, "spec"), "template");
    const json* pod_spec = Member(tmpl, "spec");
    if (pod_spec != nullptr)
      AddEnvOps(*pod_spec, "/spec/template/spec", env, &ops);
    AddAnnotationOps(metadata, "/metadata", new_annotations, &ops);
    // The Job's Pods carry the decision too, so the webhook leaves them as they
    // are.
    if (tmpl != nullptr && tmpl->is_object()) {
      AddAnnotationOps(Member(tmpl, "metadata"), "/spec/template/metadata",
                       new_annotations, &ops);
    }
  }
  answer["patchType"] = "JSONPatch";
  answer["patch"] = absl::Base64Escape(ops.dump());
  out.result = "patched";
  out.reply = Json200(response);
  if (options_.log && !dry_run) {
    const monta::v1::Candidate& c = decided->chosen();
    options_.log(absl::StrCat(
        "admission: ", is_pod ? "Pod " : "Job ", object_name, " decision ", id,
        ": ", c.name(), " chunks=", c.chunks_effective(),
        " predicted_alltoall_seconds_per_layer=",
        FormatNumber(c.total_seconds_per_layer()),
        " speedup_over_flat=", FormatNumber(c.speedup_over_flat()),
        " evidence=", decided->evidence().source()));
  }
  return out;
}

AdmissionHandler::Decider RegistryDecider(const registry::Registry* registry,
                                          metrics::PlannerMetrics* metrics,
                                          store::DecisionLog* decisions) {
  return [registry, metrics, decisions](
             const monta::v1::StrategyRequest& request, bool record_decision) {
    return api::DecideStrategy(request, registry,
                               record_decision ? metrics : nullptr,
                               record_decision ? decisions : nullptr);
  };
}

}  // namespace monta::admission
