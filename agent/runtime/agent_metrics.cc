#include "agent/runtime/agent_metrics.h"

#include <utility>

#include "prometheus/metric_family.h"

namespace monta::agent {
namespace {

class RegisteredGauge : public prometheus::Collectable {
 public:
  RegisteredGauge(std::string node, std::function<bool()> registered)
      : node_(std::move(node)), registered_(std::move(registered)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = "monta_agent_registered";
    family.help = "1 while the agent holds a lease with the planner";
    family.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.label = {{"node", node_}};
    metric.gauge.value = registered_() ? 1 : 0;
    family.metric.push_back(metric);
    return {family};
  }

 private:
  const std::string node_;
  const std::function<bool()> registered_;
};

}  // namespace

AgentMetrics::AgentMetrics(prometheus::Registry& registry, std::string node,
                           std::function<bool()> registered)
    : node_(std::move(node)),
      runs_(prometheus::BuildCounter()
                .Name("monta_agent_benchmark_runs_total")
                .Help("Benchmark tasks this agent ran, by result")
                .Register(registry)),
      discarded_(prometheus::BuildCounter()
                     .Name("monta_agent_discarded_errors_total")
                     .Help("Errors the agent logged and dropped, by site")
                     .Register(registry)),
      gauges_(std::make_shared<RegisteredGauge>(node_, std::move(registered))) {
}

void AgentMetrics::RecordBenchmarkRun(const std::string& result) {
  runs_.Add({{"node", node_}, {"result", result}}).Increment();
}

void AgentMetrics::RecordDiscardedError(const std::string& site) {
  discarded_.Add({{"node", node_}, {"site", site}}).Increment();
}

}  // namespace monta::agent
