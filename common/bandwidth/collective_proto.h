// The one place where monta.v1.Collective (the wire) meets
// bandwidth::Collective (the math). Both use the same numbers; this file
// checks that at compile time and rejects the numbers the math has no
// meaning for.
#ifndef MONTA_COMMON_BANDWIDTH_COLLECTIVE_PROTO_H_
#define MONTA_COMMON_BANDWIDTH_COLLECTIVE_PROTO_H_

#include "absl/status/statusor.h"
#include "common/bandwidth/bandwidth.h"
#include "proto/monta/v1/benchmark.pb.h"

namespace monta::bandwidth {

// COLLECTIVE_UNSPECIFIED, and numbers this build does not know (a newer
// peer's), are INVALID_ARGUMENT naming the number and the known values.
absl::StatusOr<Collective> CollectiveFromProto(monta::v1::Collective value);

monta::v1::Collective CollectiveToProto(Collective collective);

// CollectiveName of a wire value, "unknown" for one CollectiveFromProto
// rejects: metric labels and tables, which must show every curve.
const char* CollectiveProtoName(monta::v1::Collective value);

}  // namespace monta::bandwidth

#endif  // MONTA_COMMON_BANDWIDTH_COLLECTIVE_PROTO_H_
