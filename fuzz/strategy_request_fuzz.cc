// Strategy requests (GetStrategy's and the webhook's input): any bytes that
// parse as a monta.v1.StrategyRequest go through the edge validation and then
// the whole DecideStrategy path against a fixed two-node cluster. The answer
// is a reply or INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION naming the
// field; never a crash, a hang or an internal error, and a reply's feasible
// candidates predict finite, non-negative times.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fuzz/fixed_cluster.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/planning/decide_strategy.h"
#include "server/planning/request_validation.h"

namespace {

bool Expected(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return status.ok() || !status.message().empty();
    default:
      return false;
  }
}

// A feasible candidate's predictions are finite, non-negative times; the
// chosen one is feasible unless none is.
void CheckReply(const monta::v1::StrategyReply& reply) {
  bool any_feasible = false;
  for (const monta::v1::Candidate& c : reply.candidates()) {
    if (!c.feasible()) continue;
    any_feasible = true;
    for (double seconds :
         {c.forward_seconds_per_layer(), c.backward_seconds_per_layer(),
          c.total_seconds_per_layer()}) {
      if (!std::isfinite(seconds) || seconds < 0) std::abort();
    }
  }
  if (any_feasible && !reply.chosen().feasible()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  monta::v1::StrategyRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!Expected(monta::planning::ValidateJob(request.job())) ||
      !Expected(monta::planning::ValidateOptions(request.options()))) {
    std::abort();
  }
  absl::StatusOr<monta::v1::StrategyReply> reply =
      monta::planning::DecideStrategy(request, &monta::fuzz::FixedCluster(),
                                      /*metrics=*/nullptr);
  if (!Expected(reply.status())) std::abort();
  if (reply.ok()) CheckReply(*reply);
  return 0;
}
