// The agent's Prometheus metrics: whether it holds a lease, and its benchmark
// runs.
#ifndef MONTA_AGENT_RUNTIME_AGENT_METRICS_H_
#define MONTA_AGENT_RUNTIME_AGENT_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace monta::agent {

class AgentMetrics {
 public:
  // `registered` is read at scrape time (monta_agent_registered{node}).
  AgentMetrics(prometheus::Registry& registry, std::string node,
               std::function<bool()> registered);

  // monta_agent_benchmark_runs_total{node,result}; result: succeeded, failed
  // or superseded (a newer leader led: dropped unreported, handed out again).
  void RecordBenchmarkRun(const std::string& result);
  // monta_agent_discarded_errors_total{node,site}: a result dropped at `site`
  // (see DiscardError in agent_runtime.h).
  void RecordDiscardedError(const std::string& site);

  // The scrape-time gauges; register it with the metrics endpoint next to
  // `registry`.
  std::shared_ptr<prometheus::Collectable> collectable() const {
    return gauges_;
  }

 private:
  const std::string node_;
  prometheus::Family<prometheus::Counter>& runs_;
  prometheus::Family<prometheus::Counter>& discarded_;
  std::shared_ptr<prometheus::Collectable> gauges_;
};

}  // namespace monta::agent

#endif  // MONTA_AGENT_RUNTIME_AGENT_METRICS_H_
