// Conversions between the wire types (monta.v1) and the model's types for
// curves and hardware profiles.

#ifndef MONTA_SERVER_PLANNING_CURVE_CONVERSION_H_
#define MONTA_SERVER_PLANNING_CURVE_CONVERSION_H_

#include "absl/status/statusor.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/bandwidth_curve.h"
#include "server/model/hardware_profile.h"

namespace monta::planning {

// A measured curve as the model uses it. Each point's time comes from
// time_seconds, or from busbw when only that was reported. INVALID_ARGUMENT
// for an unspecified collective, bad rank counts, points with data errors
// (wrong_bytes > 0), or sizes that are not strictly increasing.
absl::StatusOr<monta::model::BandwidthCurve> CurveFromProto(
    const monta::v1::BandwidthCurve& curve);

monta::v1::HardwareProfile ProfileToProto(
    const monta::model::HardwareProfile& profile);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_CURVE_CONVERSION_H_
