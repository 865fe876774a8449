#include "server/model/fabric_price.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace monta::model {
namespace {

absl::Status CheckInputs(const JobFabric& fabric, const std::vector<int>& order,
                         const RankLayout& layout) {
  const int g = layout.ranks_per_node;
  const int t = layout.tensor_parallel;
  const int e = layout.expert_parallel;
  if (g < 1 || t < 1 || e < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank layout: ranks per node, t and e must be >= 1, got ",
                     g, ", ", t, ", ", e));
  }
  if (g % t != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank layout: t (", t, ") must divide the ranks per node (", g, ")"));
  }
  const int64_t nodes = static_cast<int64_t>(fabric.node_rack.size());
  const int64_t world = nodes * g;
  if (nodes == 0 || world % (int64_t{t} * e) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank layout: t * e (", int64_t{t} * e,
                     ") must divide the world (", world, " ranks)"));
  }
  if (static_cast<int64_t>(order.size()) != nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("order: expected ", nodes, " nodes, got ", order.size()));
  }
  std::vector<bool> seen(nodes, false);
  for (int n : order) {
    if (n < 0 || n >= nodes || seen[n]) {
      return absl::InvalidArgumentError(
          absl::StrCat("order: expected a permutation of 0..", nodes - 1,
                       ", got node ", n, " out of range or twice"));
    }
    seen[n] = true;
  }
  const int racks = static_cast<int>(fabric.racks.size());
  for (size_t i = 0; i < fabric.node_rack.size(); ++i) {
    if (fabric.node_rack[i] < 0 || fabric.node_rack[i] >= racks) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", i, ": not in a rack of the fabric"));
    }
  }
  for (const JobFabric::Rack& r : fabric.racks) {
    if (r.block < -1 || r.block >= static_cast<int>(fabric.blocks.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rack ", r.name, ": block index ", r.block, " out of range"));
    }
  }
  return absl::OkStatus();
}

// Adds m * (e - m) / e per level member count m of one EP group: what the
// group's members under one uplink send through it (and, symmetrically,
// receive), per byte each rank sends.
void AddGroup(const std::vector<int>& member_index, int e,
              std::vector<int>& counts, std::vector<double>& load) {
  std::vector<int> touched;
  for (int i : member_index) {
    if (i < 0) continue;
    if (counts[i]++ == 0) touched.push_back(i);
  }
  for (int i : touched) {
    load[i] += static_cast<double>(counts[i]) * (e - counts[i]) / e;
    counts[i] = 0;
  }
}

bool SlowerFirst(const UplinkLoad& a, const UplinkLoad& b) {
  const bool a_priced = a.bytes_per_second > 0;
  const bool b_priced = b.bytes_per_second > 0;
  if (a_priced != b_priced) return a_priced;
  const double sa =
      a_priced ? a.seconds_per_rank_byte() : a.bytes_per_rank_byte;
  const double sb =
      b_priced ? b.seconds_per_rank_byte() : b.bytes_per_rank_byte;
  if (sa != sb) return sa > sb;
  return std::make_tuple(a.level, a.index) < std::make_tuple(b.level, b.index);
}

double TotalBytes(const FabricPrice& p) {
  double total = 0;
  for (const UplinkLoad& u : p.uplinks) total += u.bytes_per_rank_byte;
  return total;
}

// Nodes grouped by block, then rack; `fullest_first` orders blocks and
// racks by how many of the job's nodes they hold, else by where the job
// first names them. Nodes keep their given order inside a rack.
std::vector<int> RackMajor(const JobFabric& fabric, bool fullest_first) {
  const int n = static_cast<int>(fabric.node_rack.size());
  const size_t racks = fabric.racks.size();
  // Block slot: blocks.size() stands for "in no block".
  const size_t none = fabric.blocks.size();
  auto block_of = [&](int node) {
    const int b = fabric.racks[fabric.node_rack[node]].block;
    return b < 0 ? none : static_cast<size_t>(b);
  };
  std::vector<int> rack_first(racks, n), rack_count(racks, 0);
  std::vector<int> block_first(none + 1, n), block_count(none + 1, 0);
  for (int i = 0; i < n; ++i) {
    const int r = fabric.node_rack[i];
    rack_first[r] = std::min(rack_first[r], i);
    ++rack_count[r];
    block_first[block_of(i)] = std::min(block_first[block_of(i)], i);
    ++block_count[block_of(i)];
  }
  auto key = [&](int i) {
    const int r = fabric.node_rack[i];
    const size_t b = block_of(i);
    return fullest_first
               ? std::make_tuple(-block_count[b], block_first[b],
                                 -rack_count[r], rack_first[r], i)
               : std::make_tuple(0, block_first[b], 0, rack_first[r], i);
  };
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return key(a) < key(b); });
  return order;
}

}  // namespace

absl::StatusOr<FabricPrice> PriceFabric(const JobFabric& fabric,
                                        const std::vector<int>& order,
                                        const RankLayout& layout) {
  if (absl::Status s = CheckInputs(fabric, order, layout); !s.ok()) return s;
  const int g = layout.ranks_per_node;
  const int t = layout.tensor_parallel;
  const int e = layout.expert_parallel;
  const int64_t world = static_cast<int64_t>(order.size()) * g;
  std::vector<double> rack_load(fabric.racks.size(), 0);
  std::vector<double> block_load(fabric.blocks.size(), 0);
  std::vector<int> rack_counts(fabric.racks.size(), 0);
  std::vector<int> block_counts(fabric.blocks.size(), 0);
  std::vector<int> racks_of(e), blocks_of(e);
  for (int64_t base = 0; base < world; base += int64_t{t} * e) {
    for (int j = 0; j < t; ++j) {  // one EP group per TP rank
      for (int i = 0; i < e; ++i) {
        const int64_t rank = base + j + int64_t{i} * t;
        const int rack = fabric.node_rack[order[rank / g]];
        racks_of[i] = rack;
        blocks_of[i] = fabric.racks[rack].block;
      }
      AddGroup(racks_of, e, rack_counts, rack_load);
      AddGroup(blocks_of, e, block_counts, block_load);
    }
  }
  FabricPrice price;
  for (size_t r = 0; r < rack_load.size(); ++r) {
    if (rack_load[r] <= 0) continue;
    price.uplinks.push_back({UplinkLevel::kRack, static_cast<int>(r),
                             rack_load[r],
                             fabric.racks[r].uplink_bytes_per_second,
                             fabric.racks[r].uplink_declared_bytes_per_second});
  }
  for (size_t b = 0; b < block_load.size(); ++b) {
    if (block_load[b] <= 0) continue;
    price.uplinks.push_back(
        {UplinkLevel::kBlock, static_cast<int>(b), block_load[b],
         fabric.blocks[b].uplink_bytes_per_second,
         fabric.blocks[b].uplink_declared_bytes_per_second});
  }
  std::sort(price.uplinks.begin(), price.uplinks.end(), SlowerFirst);
  return price;
}

absl::StatusOr<OrderAdvice> AdviseOrder(const JobFabric& fabric,
                                        const RankLayout& layout) {
  OrderAdvice advice;
  advice.order.resize(fabric.node_rack.size());
  std::iota(advice.order.begin(), advice.order.end(), 0);
  absl::StatusOr<FabricPrice> given = PriceFabric(fabric, advice.order, layout);
  if (!given.ok()) return given.status();
  advice.given = *given;
  advice.advised = *given;
  for (bool fullest_first : {false, true}) {
    std::vector<int> order = RackMajor(fabric, fullest_first);
    absl::StatusOr<FabricPrice> p = PriceFabric(fabric, order, layout);
    if (!p.ok()) return p.status();
    const double now = advice.advised.seconds_per_rank_byte();
    const double s = p->seconds_per_rank_byte();
    // Faster, or as fast with fewer bytes through the uplinks (capacities
    // not known).
    const bool better =
        s < now * (1 - 1e-9) ||
        (s <= now * (1 + 1e-9) &&
         TotalBytes(*p) < TotalBytes(advice.advised) * (1 - 1e-9));
    if (better) {
      advice.order = std::move(order);
      advice.advised = *std::move(p);
    }
  }
  for (size_t i = 0; i < advice.order.size(); ++i) {
    if (advice.order[i] != static_cast<int>(i)) advice.changed = true;
  }
  return advice;
}

}  // namespace monta::model
