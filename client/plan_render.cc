#include "client/plan_render.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/table.h"
#include "common/proto_names.h"

namespace monta::client {
namespace {

std::string CurveLine(const monta::v1::CurveEvidence& curve) {
  std::string out = absl::StrCat("  ", ShortName(curve.used_as()), ": ",
                                 ShortName(curve.origin()));
  if (curve.origin() == monta::v1::EVIDENCE_SOURCE_MEASURED) {
    absl::StrAppend(&out, " on ", absl::StrJoin(curve.nodes(), ","), ", ",
                    ShortDuration(curve.age_seconds()), " old, ",
                    HumanBytes(curve.min_bytes()), "..",
                    HumanBytes(curve.max_bytes()));
    if (!curve.task_id().empty()) {
      absl::StrAppend(&out, ", task ", curve.task_id());
    }
  }
  if (curve.extrapolated()) {
    absl::StrAppend(&out, " (extrapolated beyond the measured sizes)");
  }
  return absl::StrCat(out, "\n");
}

std::string CandidatesTable(const monta::v1::StrategyReply& reply) {
  Table table({"", "RANK", "STRATEGY", "CHUNKS", "FWD/LAYER", "BWD/LAYER",
               "TOTAL/LAYER", "PER STEP", "A2A+AG/LAYER", "INTER BYTES/RANK",
               "VS FLAT", "BOTTLENECK"});
  std::string infeasible;
  for (const auto& c : reply.candidates()) {
    if (!c.feasible()) {
      absl::StrAppend(&infeasible, "  infeasible: ", ShortName(c.kind()), ": ",
                      c.infeasible_reason(), "\n");
      continue;
    }
    const bool chosen =
        c.kind() == reply.chosen().kind() &&
        c.chunks_requested() == reply.chosen().chunks_requested() &&
        c.rank() == reply.chosen().rank();
    std::string chunks = absl::StrCat(c.chunks_effective());
    if (c.chunks_requested() != c.chunks_effective()) {
      chunks = absl::StrCat(c.chunks_effective(), " (asked ",
                            c.chunks_requested(), ")");
    }
    table.AddRow(
        {chosen ? "*" : "", absl::StrCat(c.rank()), ShortName(c.kind()), chunks,
         HumanSeconds(c.forward_seconds_per_layer()),
         HumanSeconds(c.backward_seconds_per_layer()),
         HumanSeconds(c.total_seconds_per_layer()),
         HumanSeconds(c.step_seconds()),
         absl::StrCat(c.alltoalls_per_layer(), "+", c.allgathers_per_layer()),
         HumanBytes(c.inter_node_bytes_per_rank()),
         c.speedup_over_flat() > 0
             ? absl::StrFormat("%.2fx", c.speedup_over_flat())
             : "-",
         ShortName(c.limited_by())});
  }
  return table.Render() + infeasible;
}

// "rack uplink r1 at 10 MiB/s (measured, task t-7)".
std::string LinkText(const monta::v1::FabricLevelLoad& link) {
  const char* level = "node link";
  if (link.level() == monta::v1::FABRIC_LEVEL_RACK_UPLINK) {
    level = "rack uplink";
  } else if (link.level() == monta::v1::FABRIC_LEVEL_SPINE) {
    level = "spine (block uplink)";
  }
  std::string source = "not measured";
  if (!link.task_id().empty()) {
    source = absl::StrCat("measured, task ", link.task_id());
  } else if (link.declared()) {
    source = "declared";
  } else if (link.level() == monta::v1::FABRIC_LEVEL_NODE_LINK) {
    source = "profile";
  }
  return absl::StrCat(level, " ", link.name(), " at ",
                      HumanBytes(link.bytes_per_second()), "/s (", source, ")");
}

std::string FabricText(const monta::v1::StrategyReply& reply) {
  if (!reply.has_rank_order()) return "";
  const auto& a = reply.rank_order();
  std::string out;
  if (reply.chosen().has_fabric_bound()) {
    absl::StrAppend(&out, "Network bounded by: ",
                    LinkText(reply.chosen().fabric_bound()), "\n");
  }
  absl::StrAppend(
      &out, "Rank order: ", absl::StrJoin(a.nodes(), ","), " (",
      a.ranks_per_node(), " ranks per node; rank r on node r / ",
      a.ranks_per_node(), ")\n",
      absl::StrFormat("  flat dispatch AllToAll: %s with the given order (%s), "
                      "%s with the advised one (%s)\n",
                      HumanSeconds(a.given_dispatch_seconds()),
                      LinkText(a.given_bound()),
                      HumanSeconds(a.advised_dispatch_seconds()),
                      LinkText(a.advised_bound())),
      absl::StrFormat("  best per layer: %s given, %s advised (%s)\n",
                      HumanSeconds(a.given_seconds_per_layer()),
                      HumanSeconds(a.advised_seconds_per_layer()),
                      ShortName(a.advised_kind())),
      "  ", a.note(), "\n");
  return out;
}

}  // namespace

std::string EvidenceText(const monta::v1::Evidence& evidence) {
  std::string out = absl::StrCat("\nEvidence: ", ShortName(evidence.origin()));
  if (!evidence.profile().empty()) {
    absl::StrAppend(&out, " (profile ", evidence.profile(), " ",
                    evidence.profile_version(), ")");
  }
  absl::StrAppend(&out, "\n");
  for (const auto& curve : evidence.curves()) {
    absl::StrAppend(&out, CurveLine(curve));
  }
  if (evidence.has_verified()) {
    const auto& v = evidence.verified();
    absl::StrAppend(&out, "  verified: times measured by verify task ",
                    v.task_id(), ", ", ShortDuration(v.age_seconds()),
                    " old\n");
  }
  if (evidence.has_calibration()) {
    const auto& c = evidence.calibration();
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "  calibration: network x%.3f, local x%.3f, latency x%.3f, %.3f "
            "ms per chunk, gamma %.2f (fitted by verify task %s, %s old; "
            "median |error| %.1f%% -> %.1f%%)\n",
            c.network_scale_ratio(), c.local_scale_ratio(),
            c.latency_scale_ratio(), c.per_chunk_overhead_seconds() * 1e3,
            c.contention_factor(), c.task_id(), ShortDuration(c.age_seconds()),
            c.error_before_ratio() * 100, c.error_after_ratio() * 100));
  }
  for (const auto& uplink : evidence.fabric().uplinks()) {
    absl::StrAppend(
        &out, "  fabric: ", LinkText(uplink),
        absl::StrFormat(": %.2f bytes per byte a rank sends, %s per dispatch\n",
                        uplink.bytes_per_rank_byte(),
                        HumanSeconds(uplink.dispatch_seconds())));
  }
  if (!evidence.fabric().outside().empty()) {
    absl::StrAppend(&out, "  fabric: outside: ",
                    absl::StrJoin(evidence.fabric().outside(), ","),
                    " (uplinks not priced)\n");
  }
  for (const auto& note : evidence.notes()) {
    absl::StrAppend(&out, "  note: ", note, "\n");
  }
  return out;
}

std::string PlanText(const monta::v1::StrategyReply& reply) {
  const auto& t = reply.traffic();
  std::string out = absl::StrFormat(
      "Traffic per rank and AllToAll: dispatch %s (capacity %d tokens, %d "
      "tokens/rank), EP group %d with %d on the rank's node; %d nodes x %d "
      "ranks\n",
      HumanBytes(t.dispatch_bytes()), t.capacity_tokens(), t.tokens_per_rank(),
      t.ep_group_size(), t.ep_members_on_node(), t.nodes(), t.gpus_per_node());
  absl::StrAppend(&out, "Experts priced as ", ShortName(reply.expert_layout()),
                  " (docs/MODEL.md §4)\n\n");
  absl::StrAppend(&out, CandidatesTable(reply));
  const auto& chosen = reply.chosen();
  absl::StrAppend(&out, "\nChosen: ", ShortName(chosen.kind()), " with ",
                  chosen.chunks_effective(), " chunk(s), ",
                  absl::StrFormat("%.2fx", chosen.speedup_over_flat()),
                  " faster AllToAll than flat");
  if (chosen.predicted_step_gain_ratio() > 0) {
    absl::StrAppend(&out,
                    absl::StrFormat(", predicted step time -%.1f%%",
                                    100 * chosen.predicted_step_gain_ratio()));
  }
  absl::StrAppend(&out, "\n", FabricText(reply),
                  EvidenceText(reply.evidence()));
  return out;
}

}  // namespace monta::client
