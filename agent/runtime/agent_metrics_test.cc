#include "agent/runtime/agent_metrics.h"

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace monta::agent {
namespace {

TEST(AgentMetricsTest, RegisteredGaugeFollowsTheRuntimeAndRunsAreCounted) {
  prometheus::Registry registry;
  bool registered = false;
  AgentMetrics metrics(registry, "node-a", [&] { return registered; });
  prometheus::TextSerializer text;
  EXPECT_NE(text.Serialize(metrics.collectable()->Collect())
                .find("monta_agent_registered{node=\"node-a\"} 0"),
            std::string::npos);
  registered = true;
  EXPECT_NE(text.Serialize(metrics.collectable()->Collect())
                .find("monta_agent_registered{node=\"node-a\"} 1"),
            std::string::npos);
  metrics.RecordBenchmarkRun("succeeded");
  metrics.RecordBenchmarkRun("failed");
  metrics.RecordBenchmarkRun("succeeded");
  const std::string out = text.Serialize(registry.Collect());
  EXPECT_NE(out.find("monta_agent_benchmark_runs_total{node=\"node-a\",result="
                     "\"succeeded\"} 2"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace monta::agent
