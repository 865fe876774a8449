// Where the planner keeps the decisions it made (GetStrategy and admission),
// for audit and offline comparison of predictions with what jobs then measured.
#ifndef MONTA_SERVER_STORE_DECISION_LOG_H_
#define MONTA_SERVER_STORE_DECISION_LOG_H_

#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/store/record_done.h"

namespace monta::store {

class DecisionLog {
 public:
  virtual ~DecisionLog() = default;
  // One successful decision; `stored` is told once whether it is stored
  // (record_done.h), and the decision is answered only if it is. Must not
  // block: it runs on the RPC path (a gRPC callback thread).
  virtual void RecordDecision(const monta::v1::StrategyRequest& request,
                              const monta::v1::StrategyReply& reply,
                              RecordDone stored) = 0;
  // One verify run (montactl verify): the plan scored against measurements.
  virtual void RecordVerification(const monta::v1::VerifyRequest& request,
                                  const monta::v1::VerifyReply& reply,
                                  RecordDone stored) {
    stored(absl::OkStatus());
  }
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_DECISION_LOG_H_
