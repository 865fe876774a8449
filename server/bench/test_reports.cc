#include "server/bench/test_reports.h"

#include <vector>

#include "server/bench/curve_forming.h"

namespace monta::coordination {

monta::v1::RunBenchmarkRequest PairForTesting() {
  monta::v1::RunBenchmarkRequest request;
  request.add_nodes("a");
  request.add_nodes("b");
  request.set_timeout_seconds(30);
  return request;
}

monta::v1::ReportBenchmarkRequest ReportForTesting(
    const monta::v1::BenchmarkTask& task, const std::string& node,
    double seconds, double rank_step) {
  monta::v1::ReportBenchmarkRequest report;
  report.set_task_id(task.task_id());
  report.set_node_name(node);
  report.mutable_measured_at()->set_seconds(4102444800);  // 2100-01-01
  for (int r : RanksOf(task, node)) report.add_ranks(r);
  for (int i = 0; i < SeriesCount(task); ++i) {
    monta::v1::SeriesTimes& series = *report.add_series();
    if (task.dispatches_size() > 0) {
      series.set_dispatch_index(i);
    } else {
      series.set_collective(
          static_cast<monta::v1::Collective>(task.collectives(i)));
    }
    for (uint64_t bytes : SeriesSizes(task, i)) {
      monta::v1::SizeTimes& size = *series.add_sizes();
      size.set_message_bytes(bytes);
      for (int r = 0; r < task.ranks_per_node(); ++r) {
        size.add_rank_seconds(seconds + r * rank_step);
        size.add_rank_wrong_bytes(0);
      }
    }
  }
  return report;
}

}  // namespace monta::coordination
