// Where the planner keeps the decisions it made (GetStrategy and admission),
// for audit and offline comparison of predictions with what jobs then measured.
#ifndef MONTA_SERVER_STORE_DECISION_LOG_H_
#define MONTA_SERVER_STORE_DECISION_LOG_H_

#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"

namespace monta::store {

class DecisionLog {
 public:
  virtual ~DecisionLog() = default;
  // One successful decision. Must not block for long: it runs on the RPC path.
  virtual void RecordDecision(const monta::v1::StrategyRequest& request,
                              const monta::v1::StrategyReply& reply) = 0;
  // One verify run (montactl verify): the plan scored against measurements.
  virtual void RecordVerification(const monta::v1::VerifyRequest& request,
                                  const monta::v1::VerifyReply& reply) {}
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_DECISION_LOG_H_
