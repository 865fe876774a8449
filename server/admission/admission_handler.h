// Kubernetes admission reviews (admission.k8s.io/v1) of Pods and batch/v1 Jobs
// carrying the annotation monta.io/moe: review JSON in, response JSON out. No
// sockets here; webhook_server.h serves it over HTTPS.
//
// - /mutate: plans the job and answers a JSONPatch that adds MONTA_* env vars
// to
//   every container and init container, and records the decision in
//   annotations.
// - /validate: denies a malformed (400) or impossible (422) monta.io/moe spec
//   with a message naming the field.
// - Objects without the annotation, other kinds and other operations pass
//   untouched (result "skipped"). So do objects that already carry
//   monta.io/decision (e.g. Pods created from a Job template this webhook
//   patched), so that every Pod of a Job keeps the Job's decision.
// - When the planner cannot decide (an error that is not the spec's fault),
//   both allow without a patch and add a warning (result "error"), matching the
//   webhooks' failurePolicy Ignore.
// See README.md in this folder for the placement rules and the full contract.
#ifndef MONTA_SERVER_ADMISSION_ADMISSION_HANDLER_H_
#define MONTA_SERVER_ADMISSION_ADMISSION_HANDLER_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/metrics/planner_metrics.h"
#include "server/planning/calibration.h"
#include "server/planning/decide_strategy.h"
#include "server/registry/registry.h"
#include "server/store/decision_log.h"

namespace monta::admission {

inline constexpr char kMoeAnnotation[] = "monta.io/moe";
inline constexpr char kProfileAnnotation[] = "monta.io/profile";
inline constexpr char kStrategyAnnotation[] = "monta.io/strategy";
inline constexpr char kDecisionIdAnnotation[] = "monta.io/decision-id";
inline constexpr char kDecisionAnnotation[] = "monta.io/decision";

// Kubernetes shows at most 256 characters of one warning.
inline constexpr size_t kMaxWarningChars = 256;

enum class Operation { kMutate, kValidate };

// "mutate" or "validate" (the metrics' operation label).
const char* OperationName(Operation op);

// What the HTTP layer sends back.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct AdmissionOptions {
  // A new unique decision id; null = a random UUID (version 4).
  std::function<std::string()> new_decision_id;
  // Receives one line per patched decision (namespace/name, id, strategy); may
  // be null.
  std::function<void(const std::string&)> log;
  // Clock for the decision's timestamp; null = absl::Now.
  std::function<absl::Time()> now;
  // Whether this replica may plan now; null = always. While it answers an
  // error (a follower replica before its first list, or lagging), every
  // review gets HTTP 503 naming why, planned by nobody: the API server
  // applies the webhook's failurePolicy instead of this replica answering
  // from a registry not loaded yet.
  std::function<absl::Status()> ready;
};

// One answered review: the HTTP reply and the metrics' result label
// ("patched", "allowed", "denied", "skipped" or "error").
struct ReviewOutcome {
  HttpReply reply;
  std::string result;
};

class AdmissionHandler {
 public:
  // Plans a request. `record_decision` is true for /mutate only: a validation
  // is a check, not a decision, and must not count twice in the decision
  // metrics.
  using Decider = std::function<absl::StatusOr<monta::v1::StrategyReply>(
      const monta::v1::StrategyRequest& request, bool record_decision)>;

  // `metrics` may be null (no admission metrics) and must outlive the handler.
  AdmissionHandler(Decider decide, metrics::PlannerMetrics* metrics,
                   AdmissionOptions options = {});

  // Answers one AdmissionReview body and records monta_admission_* metrics.
  // HTTP 400 (text/plain) for a body that is not an AdmissionReview v1 request;
  // otherwise HTTP 200 with the AdmissionReview response. Thread-safe.
  HttpReply Handle(Operation op, absl::string_view body) const;

  // Counts a review the HTTP layer refused before reading it (e.g. 413).
  void RecordRefused(Operation op) const;

 private:
  ReviewOutcome Review(Operation op, absl::string_view body) const;

  Decider decide_;
  metrics::PlannerMetrics* metrics_;
  AdmissionOptions options_;
  // Profile name -> GPUs per node, to derive placement.nodes from the world
  // size.
  std::map<std::string, int> profile_gpus_;
};

// The planner's decider: planning::DecideStrategy against `registry`; decisions
// recorded in `metrics` and logged to `decisions` (either may be null) when
// asked to; calibrations and verified runs from `knowledge` (nullable) as
// GetStrategy uses them. All must outlive it.
AdmissionHandler::Decider RegistryDecider(
    const registry::Registry* registry, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions = nullptr,
    const planning::PlanKnowledge* knowledge = nullptr,
    planning::FabricTreeSource fabric_tree = nullptr);

// JSON Pointer (RFC 6901) escaping of one reference token: "~" -> "~0",
// "/" -> "~1".
std::string EscapeJsonPointer(absl::string_view token);

}  // namespace monta::admission

#endif  // MONTA_SERVER_ADMISSION_ADMISSION_HANDLER_H_
