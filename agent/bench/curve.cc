#include "agent/bench/curve.h"

#include <algorithm>

#include "common/bandwidth/collective_proto.h"

namespace monta::bench {

monta::v1::BandwidthCurve ToBandwidthCurve(
    const std::vector<SweepPoint>& points, const CurveInfo& info) {
  monta::v1::BandwidthCurve curve;
  curve.set_collective(bandwidth::CollectiveToProto(info.collective));
  curve.set_scope(info.scope);
  curve.set_backend(info.backend);
  curve.set_nranks(info.nranks);
  curve.set_n_nodes(info.n_nodes);
  std::vector<std::string> nodes = info.nodes;
  std::sort(nodes.begin(), nodes.end());
  for (const std::string& n : nodes) curve.add_nodes(n);
  curve.set_strategy_kind(info.strategy);
  curve.set_chunks(info.chunks);
  curve.set_task_id(info.task_id);
  const int64_t nanos = absl::ToUnixNanos(info.measured_at);
  curve.mutable_measured_at()->set_seconds(nanos / 1000000000);
  curve.mutable_measured_at()->set_nanos(
      static_cast<int32_t>(nanos % 1000000000));
  uint64_t last = 0;
  for (const SweepPoint& p : points) {
    if (p.bytes <= last || p.time_us <= 0) continue;
    last = p.bytes;
    monta::v1::CurvePoint* out = curve.add_points();
    out->set_message_bytes(p.bytes);
    out->set_time_seconds(p.time_us * 1e-6);
    out->set_algbw_bytes_per_second(p.algbw_gbps * 1e9);
    out->set_busbw_bytes_per_second(p.busbw_gbps * 1e9);
    out->set_wrong_bytes(p.wrong);
  }
  return curve;
}

}  // namespace monta::bench
