#include "server/model/profile_view.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/schedule/schedule.h"

namespace monta::model {

using ::monta::bandwidth::Collective;

namespace {

// The profile's AllToAll latency is quoted for 8 ranks.
constexpr int kLatencyReferenceRanks = 8;

double AllToAllAlpha(const HardwareProfile& p, int nranks) {
  return schedule::LatencyForGroupSeconds(p.alltoall_latency_seconds,
                                          kLatencyReferenceRanks, nranks,
                                          p.alltoall_per_peer_latency_seconds);
}

}  // namespace

absl::StatusOr<ClusterView> ProfileClusterView(const HardwareProfile& profile,
                                               int nodes, int gpus_per_node) {
  if (nodes < 1 || gpus_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile view: need >= 1 node and rank, got ", nodes,
                     " x ", gpus_per_node));
  }
  // Curves need at least two ranks; a one-rank node still has a fabric.
  const int g = std::max(2, gpus_per_node);
  // The inter-node curve describes the smallest AllToAll that crosses the
  // network, two nodes, whatever the cluster's size: the cost model moves its
  // alpha to each op's own group (docs/MODEL.md §2), and a link rate does
  // not depend on how many nodes exist.
  const int inter_ranks = 2 * gpus_per_node;
  ClusterView view;
  absl::StatusOr<BandwidthCurve> intra = BandwidthCurve::FromAlphaBeta(
      Collective::kAllToAll, g, g, AllToAllAlpha(profile, g),
      profile.IntraNodeLinkBytesPerSecond());
  if (!intra.ok()) return intra.status();
  absl::StatusOr<BandwidthCurve> inter = BandwidthCurve::FromAlphaBeta(
      Collective::kAllToAll, inter_ranks, gpus_per_node,
      AllToAllAlpha(profile, inter_ranks),
      profile.InterNodeLinkBytesPerSecond());
  if (!inter.ok()) return inter.status();
  absl::StatusOr<BandwidthCurve> gather = BandwidthCurve::FromAlphaBeta(
      Collective::kAllGather, g, g, profile.allgather_latency_seconds,
      profile.IntraNodeLinkBytesPerSecond());
  if (!gather.ok()) return gather.status();
  absl::StatusOr<BandwidthCurve> copy = BandwidthCurve::FromAlphaBeta(
      Collective::kCopy, 1, 1, profile.copy_latency_seconds,
      profile.CopyBytesPerSecond());
  if (!copy.ok()) return copy.status();
  view.alltoall_intra = *std::move(intra);
  view.alltoall_inter = *std::move(inter);
  view.allgather_intra = *std::move(gather);
  view.copy = *std::move(copy);
  view.alltoall_per_peer_latency_seconds =
      profile.alltoall_per_peer_latency_seconds;
  view.alltoall_latency_source = {
      profile.alltoall_per_peer_latency_source_min_ranks,
      profile.alltoall_per_peer_latency_source_max_ranks};
  return view;
}

}  // namespace monta::model
