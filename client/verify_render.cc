#include "client/verify_render.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/table.h"
#include "common/proto_names.h"
#include "common/strategy/strategy.h"
#include "common/strategy/strategy_proto.h"

namespace monta::client {
namespace {

namespace v1 = ::monta::v1;

std::string Ms(double seconds) {
  return absl::StrFormat("%.2f ms", seconds * 1e3);
}

std::string Percent(double ratio) {
  return absl::StrFormat("%+.1f%%", ratio * 100);
}

// Plot area and its scales: K on a log2 axis, time linear from 0.
struct Frame {
  static constexpr double kWidth = 720, kHeight = 420;
  static constexpr double kLeft = 70, kRight = 170, kTop = 40, kBottom = 50;
  double max_log2_k = 1;
  double max_seconds = 1e-3;
  double X(int k) const {
    const double w = kWidth - kLeft - kRight;
    return kLeft + w * std::log2(std::max(1, k)) / max_log2_k;
  }
  double Y(double seconds) const {
    const double h = kHeight - kTop - kBottom;
    return kTop + h * (1 - seconds / max_seconds);
  }
};

Frame MakeFrame(const v1::VerifyReply& reply) {
  Frame f;
  int max_k = 2;
  double max_s = 0;
  for (const auto& c : reply.candidates()) {
    max_k = std::max(max_k, c.chunks_requested());
    max_s = std::max({max_s, c.predicted_seconds(), c.measured_seconds(),
                      c.calibrated_seconds()});
  }
  f.max_log2_k = std::max(1.0, std::ceil(std::log2(max_k)));
  f.max_seconds = max_s > 0 ? max_s * 1.1 : 1e-3;
  return f;
}

const char* Color(v1::StrategyKind kind) {
  switch (kind) {
    case v1::STRATEGY_KIND_FLAT:
      return "#d62728";
    case v1::STRATEGY_KIND_TP_DEDUP:
      return "#1f77b4";
    case v1::STRATEGY_KIND_TP_DEDUP_PIPELINED:
      return "#2ca02c";
    case v1::STRATEGY_KIND_HIERARCHICAL:
      return "#9467bd";
    default:
      return "#7f7f7f";
  }
}

std::string Axes(const Frame& f) {
  std::string out;
  const double x0 = Frame::kLeft, x1 = Frame::kWidth - Frame::kRight;
  const double y0 = Frame::kTop, y1 = Frame::kHeight - Frame::kBottom;
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
                        x0, y0, x1 - x0, y1 - y0);
  for (int i = 0; i <= static_cast<int>(f.max_log2_k); ++i) {
    const int k = 1 << i;
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                          "text-anchor=\"middle\">%d</text>\n",
                          f.X(k), y1 + 18, k);
  }
  for (int i = 0; i <= 4; ++i) {
    const double s = f.max_seconds * i / 4;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                          "text-anchor=\"end\">%.1f ms</text>\n",
                          x0, f.Y(s), x1, f.Y(s), x0 - 6, f.Y(s) + 4, s * 1e3);
  }
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" "
                        "text-anchor=\"middle\">pipeline chunks K "
                        "(log scale)</text>\n",
                        (x0 + x1) / 2, Frame::kHeight - 12);
  return out;
}

// One strategy: predicted (and calibrated) as lines, measured as points; a
// strategy without chunks spans the K axis at its one time.
std::string Series(const Frame& f, v1::StrategyKind kind,
                   std::vector<const v1::VerifiedCandidate*> runs) {
  std::sort(runs.begin(), runs.end(), [](const auto* a, const auto* b) {
    return a->chunks_requested() < b->chunks_requested();
  });
  const char* color = Color(kind);
  const bool chunked = kind == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED;
  auto line = [&](auto seconds_of, const char* dash) {
    std::vector<std::string> pts;
    for (const auto* r : runs) {
      if (seconds_of(*r) <= 0) continue;
      pts.push_back(absl::StrFormat("%.1f,%.1f", f.X(r->chunks_requested()),
                                    f.Y(seconds_of(*r))));
    }
    if (!chunked && !runs.empty() && seconds_of(*runs[0]) > 0) {
      pts.push_back(absl::StrFormat("%.1f,%.1f", f.X(1 << int(f.max_log2_k)),
                                    f.Y(seconds_of(*runs[0]))));
    }
    return pts.size() < 2 ? std::string()
                          : absl::StrFormat(
                                "<polyline points=\"%s\" fill=\"none\" "
                                "stroke=\"%s\" stroke-width=\"2\" "
                                "stroke-dasharray=\"%s\"/>\n",
                                absl::StrJoin(pts, " "), color, dash);
  };
  std::string out =
      line([](const v1::VerifiedCandidate& r) { return r.predicted_seconds(); },
           "none");
  out += line(
      [](const v1::VerifiedCandidate& r) { return r.calibrated_seconds(); },
      "6,4");
  for (const auto* r : runs) {
    absl::StrAppendFormat(
        &out,
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\" "
        "stroke=\"%s\" stroke-width=\"2\"><title>%s K=%d measured %s, "
        "predicted %s</title></circle>\n",
        f.X(r->chunks_requested()), f.Y(r->measured_seconds()),
        r->chosen() ? 7 : 4, r->chosen() ? "white" : color, color,
        ShortName(kind), r->chunks_requested(), Ms(r->measured_seconds()),
        Ms(r->predicted_seconds()));
  }
  return out;
}

std::string Legend(const std::vector<v1::StrategyKind>& kinds) {
  std::string out;
  double y = Frame::kTop + 10;
  const double x = Frame::kWidth - Frame::kRight + 15;
  for (v1::StrategyKind kind : kinds) {
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s"
                          "</text>\n",
                          x, y, x + 20, y, Color(kind), x + 26, y + 4,
                          ShortName(kind));
    y += 18;
  }
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">line: "
                        "predicted</text>\n<text x=\"%.1f\" y=\"%.1f\" "
                        "font-size=\"11\">dashed: calibrated</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">dot: "
                        "measured</text>\n<text x=\"%.1f\" y=\"%.1f\" "
                        "font-size=\"11\">ring: chosen</text>\n",
                        x, y + 10, x, y + 26, x, y + 42, x, y + 58);
  return out;
}

}  // namespace

namespace {

// What each candidate ran, for the header and the plot's title.
std::string ScopeText(const v1::VerifyReply& reply) {
  if (reply.scope() == v1::VERIFY_SCOPE_OP) {
    return "one dispatch op per candidate";
  }
  return absl::StrCat(
      "one MoE layer per candidate (dispatch and combine, forward and "
      "backward, experts ",
      reply.plan().expert_layout() == v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL
          ? "not tensor-parallel"
          : "tensor-parallel",
      ")");
}

std::string Spread(const v1::VerifiedCandidate& c) {
  if (!(c.p90_seconds() > 0)) return "-";
  return absl::StrFormat("%.2f..%.2f ms %.0f%%%s", c.p10_seconds() * 1e3,
                         c.p90_seconds() * 1e3, c.spread_ratio() * 100,
                         c.noisy() ? " noisy" : "");
}

const char* OutcomeText(v1::CalibrationOutcome outcome) {
  switch (outcome) {
    case v1::CALIBRATION_OUTCOME_FITTED:
      return "fitted";
    case v1::CALIBRATION_OUTCOME_SHRUNK:
      return "fitted part of the way";
    case v1::CALIBRATION_OUTCOME_REFUSED:
      return "refused";
    case v1::CALIBRATION_OUTCOME_SKIPPED:
      return "skipped";
    case v1::CALIBRATION_OUTCOME_LOOPBACK:
      return "not calibrated: no link crossed";
    case v1::CALIBRATION_OUTCOME_TOO_NOISY:
      return "not calibrated: too noisy";
    default:
      return "unknown";
  }
}

// The candidate the model picks without calibration and its regret, when
// the reply names one.
std::string UncalibratedPick(const v1::VerifyReply& reply) {
  for (const auto& c : reply.candidates()) {
    if (!c.uncalibrated_chosen()) continue;
    return absl::StrFormat(
        "uncalibrated, the model picks %s K=%d: regret %.1f%%%s\n",
        ShortName(c.kind()), c.chunks_requested(),
        reply.uncalibrated_regret_ratio() * 100,
        reply.uncalibrated_regret_ratio() > 0 &&
                reply.uncalibrated_regret_within_noise()
            ? " (inside the noise of the two runs)"
            : "");
  }
  return "";
}

// The plan's candidates that run the same schedule as a simpler one, which
// verify runs once as the simpler (strategy::SameScheduleAs; docs/MODEL.md
// §11): "tp_dedup_pipelined K=1 as tp_dedup".
std::string SameScheduleNote(const v1::VerifyReply& reply) {
  const bool drops_everywhere =
      reply.scope() == v1::VERIFY_SCOPE_LAYER &&
      reply.plan().expert_layout() == v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL;
  std::vector<std::string> merged;
  for (const v1::Candidate& c : reply.plan().candidates()) {
    const std::optional<strategy::StrategyKind> kind =
        strategy::StrategyFromProto(c.kind());
    if (!c.feasible() || !kind) continue;
    const strategy::StrategyKind same =
        strategy::SameScheduleAs(*kind, 1, drops_everywhere);
    if (same == *kind) continue;
    merged.push_back(absl::StrCat(
        strategy::StrategyName(*kind),
        *kind == strategy::StrategyKind::kTpDedupPipelined ? " K=1" : "",
        " as ", strategy::StrategyName(same)));
  }
  if (merged.empty()) return "";
  return absl::StrCat("same schedule, run and scored once: ",
                      absl::StrJoin(merged, ", "), "\n");
}

// Regret, errors, and what the run did to the calibration.
std::string Summary(const v1::VerifyReply& reply) {
  std::string out = absl::StrFormat(
      "regret of the plan: %.1f%%%s; |error| median %.1f%%, max %.1f%%\n",
      reply.regret_ratio() * 100,
      reply.regret_ratio() > 0 && reply.regret_within_noise()
          ? " (inside the noise of the two runs)"
          : "",
      reply.median_error_ratio() * 100, reply.max_error_ratio() * 100);
  absl::StrAppend(&out, UncalibratedPick(reply), SameScheduleNote(reply));
  if (reply.loopback_only()) {
    absl::StrAppend(&out,
                    "these nodes do not cross a link: their benchmark "
                    "traffic stays on one host\n");
  }
  if (reply.calibration_outcome() != v1::CALIBRATION_OUTCOME_UNSPECIFIED) {
    absl::StrAppend(
        &out, "calibration: ", OutcomeText(reply.calibration_outcome()),
        reply.calibration_note().empty() ? "" : " (", reply.calibration_note(),
        reply.calibration_note().empty() ? "" : ")", "\n");
  }
  if (reply.has_calibration()) {
    const auto& c = reply.calibration();
    absl::StrAppendFormat(
        &out,
        "calibration for these nodes: network x%.3f, local x%.3f, latency "
        "x%.3f, %.3f ms per chunk, "
        "gamma %.2f; median |error| of the fitted runs %.1f%% -> %.1f%%\n",
        c.network_scale_ratio(), c.local_scale_ratio(), c.latency_scale_ratio(),
        c.per_chunk_overhead_seconds() * 1e3, c.contention_factor(),
        c.error_before_ratio() * 100, c.error_after_ratio() * 100);
  }
  return out;
}

}  // namespace

std::string VerifyTable(const v1::VerifyReply& reply) {
  Table table({"", "STRATEGY", "K", "K_EFF", "PREDICTED", "MEASURED", "ERROR",
               "P10..P90 SPREAD", "CALIBRATED", "DISPATCH", "WRONG"});
  for (const auto& c : reply.candidates()) {
    table.AddRow({c.chosen() ? (c.best() ? "*+" : "*") : (c.best() ? "+" : ""),
                  ShortName(c.kind()), absl::StrCat(c.chunks_requested()),
                  absl::StrCat(c.chunks_effective()), Ms(c.predicted_seconds()),
                  Ms(c.measured_seconds()), Percent(c.error_ratio()), Spread(c),
                  c.calibrated_seconds() > 0 ? Ms(c.calibrated_seconds()) : "-",
                  HumanBytes(c.dispatch_bytes()),
                  absl::StrCat(c.wrong_bytes())});
  }
  return absl::StrCat(
      "verify task ", reply.task().task_id(), " on ",
      absl::StrJoin(reply.nodes(), ","), " (", reply.ranks_per_node(),
      " ranks per node): ", ScopeText(reply), "\n\n", table.Render(),
      "\n(* chosen by the plan, + fastest measured)\n", Summary(reply));
}

std::string VerifySvg(const v1::VerifyReply& reply) {
  const Frame f = MakeFrame(reply);
  std::map<int, std::vector<const v1::VerifiedCandidate*>> by_kind;
  for (const auto& c : reply.candidates()) by_kind[c.kind()].push_back(&c);
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.1f\" y=\"24\" font-size=\"15\">%s on "
      "%s: time against K (regret %.1f%%)</text>\n",
      Frame::kWidth, Frame::kHeight, Frame::kLeft,
      reply.scope() == v1::VERIFY_SCOPE_OP ? "One dispatch op"
                                           : "One MoE layer",
      absl::StrJoin(reply.nodes(), ","), reply.regret_ratio() * 100);
  out += Axes(f);
  std::vector<v1::StrategyKind> kinds;
  for (const auto& [kind, runs] : by_kind) {
    kinds.push_back(static_cast<v1::StrategyKind>(kind));
    out += Series(f, kinds.back(), runs);
  }
  out += Legend(kinds);
  out += "</svg>\n";
  return out;
}

}  // namespace monta::client
