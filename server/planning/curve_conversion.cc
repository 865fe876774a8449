#include "server/planning/curve_conversion.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/bandwidth/collective_proto.h"

namespace monta::planning {

absl::StatusOr<monta::model::BandwidthCurve> CurveFromProto(
    const monta::v1::BandwidthCurve& curve) {
  absl::StatusOr<bandwidth::Collective> collective =
      bandwidth::CollectiveFromProto(curve.collective());
  if (!collective.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve ", collective.status().message()));
  }
  const int nranks = curve.nranks();
  const int n_nodes = curve.n_nodes() > 0 ? curve.n_nodes() : 1;
  if (nranks < 1 || nranks % n_nodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve nranks: must be a positive multiple of n_nodes (",
                     n_nodes, "), got ", nranks));
  }
  std::vector<monta::model::CurveSample> samples;
  samples.reserve(curve.points_size());
  // An inter-node sweep's chains (rule (e), docs/MODEL.md §4): used when
  // every point carries one.
  std::vector<monta::model::CurveSample> chain;
  for (int i = 0; i < curve.points_size(); ++i) {
    const monta::v1::CurvePoint& p = curve.points(i);
    if (p.wrong_bytes() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("curve points[", i, "]: failed its data check (",
                       p.wrong_bytes(), " wrong bytes)"));
    }
    double seconds = p.time_seconds();
    if (seconds <= 0) {
      seconds = bandwidth::TimeFromBusBwSeconds(
          *collective, nranks, static_cast<double>(p.message_bytes()),
          p.busbw_bytes_per_second());
    }
    samples.push_back({static_cast<double>(p.message_bytes()), seconds});
    const double chained = p.chain_time_seconds();
    if (!std::isfinite(chained) || chained < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "curve points[", i,
          "].chain_time_seconds: expected >= 0 and finite, got ", chained));
    }
    if (chained > 0) {
      chain.push_back({static_cast<double>(p.message_bytes()), chained});
    }
  }
  if (!chain.empty() && chain.size() == samples.size()) {
    return monta::model::BandwidthCurve::FromBothStatistics(
        *collective, nranks, nranks / n_nodes, std::move(samples),
        std::move(chain));
  }
  return monta::model::BandwidthCurve::FromSamples(
      *collective, nranks, nranks / n_nodes, std::move(samples));
}

monta::v1::HardwareProfile ProfileToProto(
    const monta::model::HardwareProfile& profile) {
  monta::v1::HardwareProfile out;
  out.set_name(profile.name);
  out.set_version(profile.version);
  out.set_description(profile.description);
  out.set_gpus_per_node(profile.gpus_per_node);
  out.set_nics_per_node(profile.nics_per_node);
  out.set_nic_bytes_per_second(profile.nic_bytes_per_second);
  out.set_nvlink_bytes_per_second(profile.nvlink_bytes_per_second);
  for (const monta::model::ProfileConstant& c : profile.constants) {
    monta::v1::ProfileConstant* pc = out.add_constants();
    pc->set_name(c.name);
    pc->set_value(c.value);
    pc->set_unit(c.unit);
    pc->set_source(c.source);
  }
  return out;
}

}  // namespace monta::planning
