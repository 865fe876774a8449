#include "server/fabric/levels.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_names.h"

namespace monta::fabric {
namespace {

using monta::v1::FabricSpan;

// The rack's sample for this round: up to `n` idle nodes, starting at the
// round's offset.
std::vector<std::string> Sample(const LevelRack& rack, int n, uint64_t round) {
  std::vector<std::string> out;
  const size_t idle = rack.idle.size();
  if (idle == 0 || n <= 0) return out;
  const size_t take = std::min(idle, static_cast<size_t>(n));
  const size_t start = static_cast<size_t>((round * n) % idle);
  for (size_t i = 0; i < take; ++i)
    out.push_back(rack.idle[(start + i) % idle]);
  return out;
}

void AddSide(const LevelRack& rack, int nodes, FabricSpan& span) {
  monta::v1::FabricSpanRack* side = span.add_racks();
  side->set_block(rack.block);
  side->set_rack(rack.name);
  side->set_nodes(nodes);
}

LevelTask InsideTask(const LevelRack& rack,
                     const std::vector<std::string>& sample) {
  LevelTask task;
  task.nodes = {sample[0], sample[1]};
  task.span.set_level(monta::v1::FABRIC_SPAN_LEVEL_RACK);
  task.span.set_concurrent_nodes(2);
  AddSide(rack, 2, task.span);
  return task;
}

// `per_side` nodes of each sample, rack `a`'s first.
LevelTask AcrossTask(const LevelRack& a, const std::vector<std::string>& sa,
                     const LevelRack& b, const std::vector<std::string>& sb,
                     int per_side) {
  LevelTask task;
  task.nodes.assign(sa.begin(), sa.begin() + per_side);
  task.nodes.insert(task.nodes.end(), sb.begin(), sb.begin() + per_side);
  task.span.set_level(a.block == b.block
                          ? monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK
                          : monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK);
  task.span.set_concurrent_nodes(2 * per_side);
  // The span's racks by name, as FabricSpan says.
  const bool a_first = a.name < b.name;
  AddSide(a_first ? a : b, per_side, task.span);
  AddSide(a_first ? b : a, per_side, task.span);
  return task;
}

}  // namespace

LevelPlan PlanLevels(std::vector<LevelRack> racks,
                     const LevelPlanOptions& options) {
  // Racks in no block last, as the tree shows them.
  std::sort(racks.begin(), racks.end(),
            [](const LevelRack& x, const LevelRack& y) {
              return std::make_tuple(x.block.empty(), x.block, x.name) <
                     std::make_tuple(y.block.empty(), y.block, y.name);
            });
  LevelPlan plan;
  std::vector<std::pair<const LevelRack*, std::vector<std::string>>> usable;
  for (const LevelRack& rack : racks) {
    std::vector<std::string> sample =
        Sample(rack, std::max(2, options.sample_nodes), options.round);
    if (sample.size() >= 2) {
      plan.tasks.push_back(InsideTask(rack, sample));
    } else {
      plan.notes.push_back(absl::StrCat(
          "rack ", rack.name, ": ", rack.idle.size(), " idle node(s) of ",
          rack.alive,
          " alive: its own level is not measured this round (needs 2)"));
    }
    if (sample.empty()) {
      plan.notes.push_back(absl::StrCat(
          "rack ", rack.name,
          ": no idle node: its uplink keeps its last measurement, or the "
          "declared capacity"));
      continue;
    }
    sample.resize(std::min(
        sample.size(), static_cast<size_t>(std::max(1, options.sample_nodes))));
    usable.emplace_back(&rack, std::move(sample));
  }
  const size_t n = usable.size();
  // A ring of neighbours: R > 2 racks give R pairs, 2 racks one.
  const size_t pairs = n < 2 ? 0 : (n == 2 ? 1 : n);
  for (size_t i = 0; i < pairs; ++i) {
    const auto& [a, sa] = usable[i];
    const auto& [b, sb] = usable[(i + 1) % n];
    plan.tasks.push_back(AcrossTask(*a, sa, *b, sb, 1));
    const int per_side = static_cast<int>(std::min(sa.size(), sb.size()));
    if (per_side >= 2) {
      plan.tasks.push_back(AcrossTask(*a, sa, *b, sb, per_side));
    }
  }
  if (n == 1) {
    plan.notes.push_back(
        absl::StrCat("rack ", usable[0].first->name,
                     ": the only rack with an idle node: no uplink is "
                     "measured this round"));
  }
  return plan;
}

double SideBytesPerSecond(const monta::v1::BandwidthCurve& curve,
                          int side_ranks) {
  const double n = curve.nranks();
  const double a = side_ranks;
  if (a < 1 || a > n - 1) return 0;
  // The largest size: the nearest to the link's steady rate (a small one may
  // ride a shaper's burst, or be all latency).
  const monta::v1::CurvePoint* largest = nullptr;
  for (const monta::v1::CurvePoint& p : curve.points()) {
    if (p.time_seconds() > 0 &&
        (largest == nullptr || p.message_bytes() > largest->message_bytes())) {
      largest = &p;
    }
  }
  if (largest == nullptr) return 0;
  return static_cast<double>(largest->message_bytes()) * a * (n - a) / n /
         largest->time_seconds();
}

double LevelBytesPerSecond(const monta::v1::BandwidthCurve& curve,
                           absl::string_view rack) {
  if (curve.n_nodes() <= 0 || curve.nranks() % curve.n_nodes() != 0) return 0;
  const int ranks_per_node = curve.nranks() / curve.n_nodes();
  const FabricSpan& span = curve.fabric();
  switch (span.level()) {
    case monta::v1::FABRIC_SPAN_LEVEL_RACK:
      if (span.racks_size() != 1 || span.racks(0).rack() != rack) return 0;
      return SideBytesPerSecond(curve, ranks_per_node);
    case monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK:
    case monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK:
      for (const auto& side : span.racks()) {
        if (side.rack() == rack) {
          return SideBytesPerSecond(curve, side.nodes() * ranks_per_node);
        }
      }
      return 0;
    default:
      return 0;
  }
}

}  // namespace monta::fabric

namespace monta::fabric {
namespace {

using monta::v1::BandwidthCurve;

// A level curve and the side it is read from.
struct Reading {
  const BandwidthCurve* curve = nullptr;
  std::string partner;  // the other rack or block
  double bytes_per_second = 0;
};

// Of two readings with one partner, the one that stands: more than 2 nodes at
// once over a pair, then the newer.
bool Better(const Reading& x, const Reading& y) {
  const bool x_loaded = x.curve->fabric().concurrent_nodes() > 2;
  const bool y_loaded = y.curve->fabric().concurrent_nodes() > 2;
  if (x_loaded != y_loaded) return x_loaded;
  return x.curve->sequence() > y.curve->sequence();
}

monta::v1::FabricMeasurement MeasurementOf(const Reading& r) {
  monta::v1::FabricMeasurement m;
  m.set_bytes_per_second(r.bytes_per_second);
  *m.mutable_measured_at() = r.curve->has_received_at()
                                 ? r.curve->received_at()
                                 : r.curve->measured_at();
  m.set_task_id(r.curve->task_id());
  m.set_concurrent_nodes(r.curve->fabric().concurrent_nodes());
  return m;
}

// The newest of each partner, then the fastest of those; sets `link` (and
// its note) or, without readings, says what stands instead.
void Choose(const std::vector<Reading>& readings, const std::string& what,
            monta::v1::FabricLink& link) {
  std::map<std::string, Reading> per_partner;
  for (const Reading& r : readings) {
    auto [it, added] = per_partner.try_emplace(r.partner, r);
    if (!added && Better(r, it->second)) it->second = r;
  }
  const Reading* best = nullptr;
  for (const auto& [partner, r] : per_partner) {
    if (best == nullptr || r.bytes_per_second > best->bytes_per_second) {
      best = &r;
    }
  }
  if (best == nullptr) {
    link.set_note(link.declared_bytes_per_second() > 0
                      ? "not measured yet: the declared capacity stands"
                      : "not measured yet, and nothing declared");
    return;
  }
  *link.mutable_measured() = MeasurementOf(*best);
  link.set_note(
      absl::StrCat("measured by task ", best->curve->task_id(), " (",
                   ShortName(best->curve->fabric().level()), ", ",
                   best->curve->fabric().concurrent_nodes(),
                   " nodes at once with ", what, " ", best->partner, ")",
                   per_partner.size() > 1
                       ? absl::StrCat("; the fastest of ", per_partner.size(),
                                      " partners' newest")
                       : ""));
}

// The level curves of the registered nodes, each once.
std::vector<const BandwidthCurve*> LevelCurves(
    const std::vector<monta::v1::NodeInfo>& registered) {
  std::map<std::string, const BandwidthCurve*> by_task;
  for (const auto& node : registered) {
    for (const BandwidthCurve& c : node.curves()) {
      const auto level = c.fabric().level();
      if (c.collective() != monta::v1::COLLECTIVE_ALLTOALL ||
          c.strategy_kind() != monta::v1::STRATEGY_KIND_UNSPECIFIED ||
          (level != monta::v1::FABRIC_SPAN_LEVEL_RACK &&
           level != monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK &&
           level != monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK)) {
        continue;
      }
      by_task.emplace(absl::StrCat(c.task_id(), "|", c.nranks()), &c);
    }
  }
  std::vector<const BandwidthCurve*> out;
  for (const auto& [key, c] : by_task) out.push_back(c);
  return out;
}

void AttachToRack(const std::vector<const BandwidthCurve*>& curves,
                  monta::v1::FabricRack& rack) {
  const BandwidthCurve* inside = nullptr;
  std::vector<Reading> uplink;
  for (const BandwidthCurve* c : curves) {
    const auto& span = c->fabric();
    if (span.level() == monta::v1::FABRIC_SPAN_LEVEL_RACK) {
      if (span.racks_size() == 1 && span.racks(0).rack() == rack.name() &&
          (inside == nullptr || c->sequence() > inside->sequence())) {
        inside = c;
      }
      continue;
    }
    if (span.racks_size() != 2) continue;
    for (int i = 0; i < 2; ++i) {
      if (span.racks(i).rack() != rack.name()) continue;
      uplink.push_back(
          {c, span.racks(1 - i).rack(), LevelBytesPerSecond(*c, rack.name())});
    }
  }
  if (inside != nullptr) {
    *rack.mutable_inside() =
        MeasurementOf({inside, "", LevelBytesPerSecond(*inside, rack.name())});
  }
  Choose(uplink, "rack", *rack.mutable_uplink());
}

void AttachToBlock(const std::vector<const BandwidthCurve*>& curves,
                   monta::v1::FabricBlock& block) {
  std::vector<Reading> uplink;
  for (const BandwidthCurve* c : curves) {
    const auto& span = c->fabric();
    if (span.level() != monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK ||
        span.racks_size() != 2) {
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (span.racks(i).block() != block.name()) continue;
      uplink.push_back({c, span.racks(1 - i).block(),
                        LevelBytesPerSecond(*c, span.racks(i).rack())});
    }
  }
  Choose(uplink, "block", *block.mutable_uplink());
}

}  // namespace

void AttachMeasurements(const std::vector<monta::v1::NodeInfo>& registered,
                        monta::v1::FabricReply& reply) {
  const std::vector<const BandwidthCurve*> curves = LevelCurves(registered);
  for (auto& block : *reply.mutable_blocks()) {
    if (!block.name().empty()) AttachToBlock(curves, block);
    for (auto& rack : *block.mutable_racks()) AttachToRack(curves, rack);
  }
}

}  // namespace monta::fabric
