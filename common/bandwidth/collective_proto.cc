#include "common/bandwidth/collective_proto.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace monta::bandwidth {

// A proto renumbering (or a new enumerator here) must fail the build, not
// silently mislabel curves.
static_assert(static_cast<int>(Collective::kAllToAll) ==
              monta::v1::COLLECTIVE_ALLTOALL);
static_assert(static_cast<int>(Collective::kAllGather) ==
              monta::v1::COLLECTIVE_ALLGATHER);
static_assert(static_cast<int>(Collective::kCopy) ==
              monta::v1::COLLECTIVE_COPY);

absl::StatusOr<Collective> CollectiveFromProto(monta::v1::Collective value) {
  switch (value) {
    case monta::v1::COLLECTIVE_ALLTOALL:
    case monta::v1::COLLECTIVE_ALLGATHER:
    case monta::v1::COLLECTIVE_COPY:
      return static_cast<Collective>(value);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "collective: expected COLLECTIVE_ALLTOALL, COLLECTIVE_ALLGATHER or "
          "COLLECTIVE_COPY, got ",
          static_cast<int>(value),
          value == monta::v1::COLLECTIVE_UNSPECIFIED ? " (unspecified)" : ""));
  }
}

monta::v1::Collective CollectiveToProto(Collective collective) {
  return static_cast<monta::v1::Collective>(collective);
}

const char* CollectiveProtoName(monta::v1::Collective value) {
  absl::StatusOr<Collective> collective = CollectiveFromProto(value);
  return collective.ok() ? CollectiveName(*collective) : "unknown";
}

}  // namespace monta::bandwidth
