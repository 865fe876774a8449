#include "server/planning/strategy_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/proto_names.h"
#include "common/schedule/schedule.h"
#include "common/strategy/strategy_proto.h"
#include "server/model/cost_model.h"
#include "server/model/hardware_profile.h"
#include "server/model/profile_view.h"
#include "server/model/strategy_search.h"
#include "server/planning/curve_conversion.h"
#include "server/planning/fabric_plan.h"
#include "server/planning/request_validation.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;
namespace model = ::monta::model;

// Where the job runs, once names and profiles are resolved.
struct Resolved {
  int nodes = 0;
  int gpus_per_node = 0;
  // Registered nodes in rank order; empty for a profile placement.
  std::vector<NodeFacts> members;
  // Profile of each member (or the one profile), same order as members.
  std::vector<const model::HardwareProfile*> node_profiles;
};

absl::StatusOr<Resolved> ResolveProfilePlacement(const v1::Placement& p) {
  absl::StatusOr<const model::HardwareProfile*> found =
      model::LookupProfile(p.profile());
  if (!found.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement.profile: ", EchoInput(p.profile()), ": ",
                     found.status().message()));
  }
  const model::HardwareProfile* profile = *found;
  if (p.nodes() < 1 || p.nodes() > model::kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement.nodes: must be in 1..", model::kMaxNodes,
                     " with a profile (docs/MODEL.md §7), got ", p.nodes()));
  }
  if (p.gpus_per_node() < 0 || p.gpus_per_node() > profile->gpus_per_node) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement.gpus_per_node: must be in 0..", profile->gpus_per_node,
        " (profile ", profile->name, "), got ", p.gpus_per_node()));
  }
  Resolved r;
  r.nodes = p.nodes();
  r.gpus_per_node =
      p.gpus_per_node() > 0 ? p.gpus_per_node() : profile->gpus_per_node;
  r.node_profiles.push_back(profile);
  return r;
}

// The profile a registered node belongs to (model::ProfileForNode): its
// declared profile_name, else the one its GPU name (or the lack of GPUs)
// implies.
absl::StatusOr<const model::HardwareProfile*> NodeProfile(
    const std::string& field, const std::string& name, const NodeFacts& facts) {
  absl::StatusOr<const model::HardwareProfile*> found = model::ProfileForNode(
      facts.profile_name, facts.gpu_count, facts.gpu_name);
  if (!found.ok()) {
    // The model names no input (common/echo.h): the declared profile, when
    // there is one, is named here.
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": node ", EchoInput(name),
                     facts.profile_name.empty()
                         ? ""
                         : absl::StrCat(" (profile_name ",
                                        EchoInput(facts.profile_name), ")"),
                     ": ", found.status().message()));
  }
  return *found;
}

absl::StatusOr<Resolved> ResolveNodePlacement(const v1::Placement& p,
                                              const NodeLookup* lookup) {
  if (lookup == nullptr) {
    return absl::FailedPreconditionError(
        "placement.node_names: no node registry to resolve names against");
  }
  if (p.node_names_size() > model::kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement.node_names: at most ", model::kMaxNodes,
                     " nodes (docs/MODEL.md §7), got ", p.node_names_size()));
  }
  if (p.nodes() != 0 && p.nodes() != p.node_names_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement.nodes: must be 0 or the number of node_names (",
                     p.node_names_size(), "), got ", p.nodes()));
  }
  if (p.gpus_per_node() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement.gpus_per_node: must be >= 0, got ", p.gpus_per_node()));
  }
  Resolved r;
  std::set<std::string> seen;
  for (int i = 0; i < p.node_names_size(); ++i) {
    const std::string& name = p.node_names(i);
    const std::string field = absl::StrCat("placement.node_names[", i, "]");
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": empty name"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": node ", EchoInput(name), " is listed twice"));
    }
    std::optional<NodeFacts> facts = lookup->Find(name);
    if (!facts) {
      return absl::NotFoundError(absl::StrCat(field, ": node ", EchoInput(name),
                                              " is not registered"));
    }
    absl::StatusOr<const model::HardwareProfile*> profile =
        NodeProfile(field, name, *facts);
    if (!profile.ok()) return profile.status();
    // Ranks this node runs: the request's, else its GPUs, else the CPU
    // profile's rank count.
    const int available =
        facts->gpu_count > 0 ? facts->gpu_count : (*profile)->gpus_per_node;
    int ranks = available;
    if (p.gpus_per_node() > 0) {
      if (facts->gpu_count > 0 && p.gpus_per_node() > facts->gpu_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "placement.gpus_per_node: must be at most the GPUs of node \"",
            name, "\" (", facts->gpu_count, "), got ", p.gpus_per_node()));
      }
      ranks = p.gpus_per_node();
    }
    if (r.gpus_per_node == 0) {
      r.gpus_per_node = ranks;
    } else if (ranks != r.gpus_per_node) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement.gpus_per_node: registered nodes differ (", r.gpus_per_node,
          " ranks on \"", r.members.front().name, "\", ", ranks, " on \"", name,
          "\"); set gpus_per_node to the ranks each node runs"));
    }
    r.members.push_back(*std::move(facts));
    r.node_profiles.push_back(*profile);
  }
  r.nodes = static_cast<int>(r.members.size());
  return r;
}

absl::StatusOr<Resolved> ResolvePlacement(const v1::Placement& p,
                                          const NodeLookup* lookup) {
  const bool by_name = p.node_names_size() > 0;
  const bool by_profile = !p.profile().empty();
  if (by_name && by_profile) {
    return absl::InvalidArgumentError(
        "placement: give node_names (registered nodes) or profile with "
        "nodes, not both");
  }
  if (by_name) return ResolveNodePlacement(p, lookup);
  if (by_profile) return ResolveProfilePlacement(p);
  return absl::InvalidArgumentError(
      "placement: required; give node_names (registered nodes) or profile "
      "with nodes");
}

enum class Role { kAllToAllIntra, kAllToAllInter, kAllGatherIntra, kCopy };
constexpr Role kRoles[] = {Role::kAllToAllIntra, Role::kAllToAllInter,
                           Role::kAllGatherIntra, Role::kCopy};

v1::CurveRole ToProtoRole(Role role) {
  switch (role) {
    case Role::kAllToAllIntra:
      return v1::CURVE_ROLE_ALLTOALL_INTRA;
    case Role::kAllToAllInter:
      return v1::CURVE_ROLE_ALLTOALL_INTER;
    case Role::kAllGatherIntra:
      return v1::CURVE_ROLE_ALLGATHER_INTRA;
    case Role::kCopy:
      return v1::CURVE_ROLE_COPY;
  }
  return v1::CURVE_ROLE_UNSPECIFIED;
}

// "alltoall_inter", ...: the name notes use.
std::string RoleName(Role role) { return ShortName(ToProtoRole(role)); }

// Only plain collectives describe the fabric; a strategy schedule's curve
// measures that schedule, not a link.
bool Matches(const v1::BandwidthCurve& c, Role role) {
  if (c.strategy_kind() != v1::STRATEGY_KIND_UNSPECIFIED &&
      c.strategy_kind() != v1::STRATEGY_KIND_FLAT) {
    return false;
  }
  if (c.chunks() > 1) return false;
  const bool inter = c.scope() == v1::SCOPE_INTER_NODE || (c.n_nodes() > 1);
  switch (role) {
    case Role::kAllToAllIntra:
      return c.collective() == v1::COLLECTIVE_ALLTOALL && !inter;
    case Role::kAllToAllInter:
      return c.collective() == v1::COLLECTIVE_ALLTOALL && inter;
    case Role::kAllGatherIntra:
      return c.collective() == v1::COLLECTIVE_ALLGATHER && !inter;
    case Role::kCopy:
      return c.collective() == v1::COLLECTIVE_COPY && !inter;
  }
  return false;
}

// When the planner formed the curve: evidence ages count from it, never from
// the agent's measured_at (display only: agent clocks may be wrong, or lie).
absl::Time ReceivedAt(const v1::BandwidthCurve& c) {
  return absl::FromUnixSeconds(c.received_at().seconds()) +
         absl::Nanoseconds(c.received_at().nanos());
}

// Of two curves, the one the planner accepted later (its sequence).
bool Newer(const v1::BandwidthCurve& a, const v1::BandwidthCurve& b) {
  return a.sequence() > b.sequence();
}

// One candidate curve for a role and where it came from.
struct Option {
  model::BandwidthCurve curve;
  const v1::BandwidthCurve* measured = nullptr;  // null: profile
  std::string profile;                           // profile name if not measured
};

// What the planner settled on for one role.
struct RoleChoice {
  Option bound;  // the slowest option: it bounds the answer
  bool any_measured = false;
  bool any_profile = false;
};

// The member for a role of anything with one per role (a ClusterView's
// curves, ExtrapolationFlags); const or not, as the holder is.
template <typename PerRole>
auto& ForRole(PerRole& v, Role role) {
  switch (role) {
    case Role::kAllToAllIntra:
      return v.alltoall_intra;
    case Role::kAllToAllInter:
      return v.alltoall_inter;
    case Role::kAllGatherIntra:
      return v.allgather_intra;
    case Role::kCopy:
      return v.copy;
  }
  return v.copy;
}

// Seconds the role's operation would take at this job's sizes; the largest
// marks the slowest node or pair.
double Score(const model::BandwidthCurve& c, Role role,
             const model::Traffic& tr) {
  const double d = tr.dispatch_bytes;
  const int t = tr.tensor_parallel_size;
  const int e = std::max(1, tr.ep_group_size);
  double message = d;
  double link = d;
  switch (role) {
    case Role::kAllToAllIntra:
    case Role::kAllToAllInter:
      message = d * c.nranks() / e;
      link = d;
      break;
    case Role::kAllGatherIntra:
      message = d / t * c.nranks();
      link = d * (t - 1) / t;
      break;
    case Role::kCopy:
      break;
  }
  const double rate = c.LinkRateAt(std::max(1.0, message)).bytes_per_second;
  return c.alpha_seconds() + (rate > 0 ? link / rate : 0);
}

// Gathers the options for one role: measured curves and the profiles that
// stand in for what no measurement covers.
class OptionSet {
 public:
  OptionSet(Role role, const Resolved& where,
            const std::vector<model::ClusterView>& profile_views,
            std::vector<std::string>* notes)
      : role_(role),
        where_(where),
        profile_views_(profile_views),
        notes_(notes) {}

  // The profile of member i (or the one profile), once per profile.
  void AddProfile(size_t i) {
    const std::string& name = where_.node_profiles[i]->name;
    for (const Option& o : options_) {
      if (o.measured == nullptr && o.profile == name) return;
    }
    options_.push_back({ForRole(profile_views_[i], role_), nullptr, name});
    choice_.any_profile = true;
  }

  // A measured curve; false (with a note) when it cannot be used.
  bool AddMeasured(const v1::BandwidthCurve& c) {
    absl::StatusOr<model::BandwidthCurve> curve = CurveFromProto(c);
    if (!curve.ok()) {
      notes_->push_back(absl::StrCat(RoleName(role_), ": curve of task \"",
                                     c.task_id(),
                                     "\" ignored: ", curve.status().message()));
      return false;
    }
    options_.push_back({*std::move(curve), &c, ""});
    choice_.any_measured = true;
    return true;
  }

  bool any_measured() const { return choice_.any_measured; }

  // The slowest node or pair bounds every rank's collective.
  RoleChoice Bound(const model::Traffic& traffic) {
    size_t slowest = 0;
    double worst = -1;
    for (size_t i = 0; i < options_.size(); ++i) {
      const double s = Score(options_[i].curve, role_, traffic);
      if (s > worst) {
        worst = s;
        slowest = i;
      }
    }
    choice_.bound = options_[slowest];
    return choice_;
  }

 private:
  const Role role_;
  const Resolved& where_;
  const std::vector<model::ClusterView>& profile_views_;
  std::vector<std::string>* notes_;
  std::vector<Option> options_;
  RoleChoice choice_;
};

// Notes the newest exclusion for `role` on exactly `nodes` (sorted) when it
// came after `used` (the curve planned with, or none): the planner did not
// take that measurement, and says why.
void NoteExclusion(Role role, const std::vector<std::string>& nodes,
                   const std::vector<const NodeFacts*>& holders,
                   const v1::BandwidthCurve* used,
                   std::vector<std::string>* notes) {
  const v1::ExcludedCurve* newest = nullptr;
  for (const NodeFacts* n : holders) {
    for (const v1::ExcludedCurve& e : n->excluded) {
      if (!Matches(e.curve(), role) ||
          !std::equal(nodes.begin(), nodes.end(), e.curve().nodes().begin(),
                      e.curve().nodes().end())) {
        continue;
      }
      if (newest == nullptr ||
          ReceivedAt(e.curve()) > ReceivedAt(newest->curve())) {
        newest = &e;
      }
    }
  }
  if (newest == nullptr ||
      (used != nullptr && ReceivedAt(*used) >= ReceivedAt(newest->curve()))) {
    return;
  }
  notes->push_back(absl::StrCat(
      RoleName(role), ": the measurement of task ", newest->curve().task_id(),
      " on ", absl::StrJoin(nodes, ","), " was excluded (",
      ShortName(newest->reason()), ": ", newest->detail(), "); ",
      used != nullptr ? absl::StrCat("planning with task ", used->task_id())
                      : std::string("not planning with it")));
}

// The racks of the job's nodes when the fabric tree prices the uplinks
// (docs/MODEL.md §12).
using RackOf = std::map<std::string, std::string>;

// "task T on a,b (span CROSS_RACK, 4 nodes at once)": a curve in a note.
std::string CurveName(const std::vector<std::string>& nodes,
                      const v1::BandwidthCurve& c) {
  std::string out =
      absl::StrCat("task ", c.task_id(), " on ", absl::StrJoin(nodes, ","));
  if (c.has_fabric() &&
      c.fabric().level() != v1::FABRIC_SPAN_LEVEL_UNSPECIFIED) {
    absl::StrAppend(&out, " (", ShortName(c.fabric().level()), ", ",
                    c.fabric().concurrent_nodes(), " nodes at once)");
  }
  return out;
}

// With the tree priced, a curve whose nodes sit in more than one rack is a
// level measurement (docs/MODEL.md §12): it saw a rack's uplink, which the
// tree prices from the level's measurement (FabricLink.measured) with the
// whole job's load. It prices its level, never the job's nodes directly,
// even when its nodes are the job's own (in a 2 x 2 cluster the level
// round's task of every node of two racks at once is). The node links come
// from curves inside a rack; only when there are none does a pair across
// racks price them (it saw the uplink too: pessimistic, noted), and a task of
// more than two nodes across racks never does.
void LeaveCrossRackCurvesToTheTree(
    const RackOf& rack_of,
    std::map<std::vector<std::string>, const v1::BandwidthCurve*>& newest,
    std::vector<std::string>* notes) {
  auto one_rack = [&](const std::vector<std::string>& key) {
    std::set<std::string> racks;
    for (const std::string& n : key) {
      auto it = rack_of.find(n);
      if (it == rack_of.end()) return false;
      racks.insert(it->second);
    }
    return racks.size() == 1;
  };
  bool any_inside = false;
  for (const auto& [key, c] : newest) any_inside |= one_rack(key);
  std::vector<std::string> left;
  std::vector<std::string> kept;
  for (auto it = newest.begin(); it != newest.end();) {
    if (one_rack(it->first)) {
      ++it;
      continue;
    }
    const std::string name = CurveName(it->first, *it->second);
    if (!any_inside && it->first.size() == 2) {
      kept.push_back(name);
      ++it;
      continue;
    }
    left.push_back(name);
    it = newest.erase(it);
  }
  if (!left.empty()) {
    notes->push_back(absl::StrCat(
        "alltoall_inter: ", absl::StrJoin(left, "; "),
        " crossed racks: a level measurement, left to the fabric tree, "
        "which prices the uplink it saw with the whole job's load "
        "(docs/MODEL.md §12), not taken as a measurement of the job's nodes; ",
        any_inside ? "node links priced from pairs inside a rack"
                   : "no curve inside a rack prices the node links"));
  }
  if (!kept.empty()) {
    notes->push_back(absl::StrCat(
        "alltoall_inter: no inter-node curve of these nodes lies inside a "
        "rack: the node links are priced from the pairs across racks (",
        absl::StrJoin(kept, "; "),
        "), which saw a rack uplink too (pessimistic for EP groups inside a "
        "rack)"));
  }
}

// Inter-node AllToAll: curves over a subset of the job's nodes, newest per
// node set; the profile stands in for nodes no measurement covered.
void AddInterNodeOptions(const Resolved& where, const RackOf* rack_of,
                         OptionSet* options, std::vector<std::string>* notes) {
  const Role role = Role::kAllToAllInter;
  std::set<std::string> names;
  for (const NodeFacts& n : where.members) names.insert(n.name);
  std::map<std::vector<std::string>, const v1::BandwidthCurve*> newest;
  for (const NodeFacts& n : where.members) {
    for (const v1::BandwidthCurve& c : n.curves) {
      if (!Matches(c, role) || c.nodes_size() < 2) continue;
      std::vector<std::string> key(c.nodes().begin(), c.nodes().end());
      std::sort(key.begin(), key.end());
      if (!std::all_of(key.begin(), key.end(), [&](const std::string& s) {
            return names.count(s) > 0;
          })) {
        continue;
      }
      auto [it, inserted] = newest.emplace(key, &c);
      if (!inserted && Newer(c, *it->second)) it->second = &c;
    }
  }
  if (rack_of != nullptr)
    LeaveCrossRackCurvesToTheTree(*rack_of, newest, notes);
  std::set<std::string> covered;
  for (const auto& [key, c] : newest) {
    if (options->AddMeasured(*c)) covered.insert(key.begin(), key.end());
  }
  std::vector<const NodeFacts*> holders;
  std::set<std::vector<std::string>> excluded_sets;
  for (const NodeFacts& n : where.members) {
    holders.push_back(&n);
    for (const v1::ExcludedCurve& e : n.excluded) {
      const auto& nodes = e.curve().nodes();
      if (Matches(e.curve(), role) && nodes.size() >= 2 &&
          std::all_of(nodes.begin(), nodes.end(),
                      [&](const std::string& s) { return names.count(s); })) {
        excluded_sets.insert({nodes.begin(), nodes.end()});
      }
    }
  }
  for (const std::vector<std::string>& set : excluded_sets) {
    auto used = newest.find(set);
    NoteExclusion(role, set, holders,
                  used == newest.end() ? nullptr : used->second, notes);
  }
  if (covered.size() >= names.size()) return;
  std::vector<std::string> missing;
  for (size_t i = 0; i < where.members.size(); ++i) {
    if (!covered.count(where.members[i].name)) {
      missing.push_back(where.members[i].name);
      options->AddProfile(i);
    }
  }
  if (options->any_measured()) {
    notes->push_back(absl::StrCat(
        RoleName(role), ": no inter-node measurement covers ",
        absl::StrJoin(missing, ", "), "; their profile also bounds"));
  }
}

// Intra-node roles: per node its newest measured curve, else its profile.
void AddPerNodeOptions(Role role, const Resolved& where, OptionSet* options,
                       std::vector<std::string>* notes) {
  std::vector<std::string> unmeasured;
  for (size_t i = 0; i < where.members.size(); ++i) {
    const NodeFacts& n = where.members[i];
    const v1::BandwidthCurve* best = nullptr;
    for (const v1::BandwidthCurve& c : n.curves) {
      // Only the node's own measurement: a curve naming other nodes would let
      // them speak for this one.
      if (!Matches(c, role) || c.nodes_size() != 1 || c.nodes(0) != n.name) {
        continue;
      }
      if (best == nullptr || Newer(c, *best)) best = &c;
    }
    NoteExclusion(role, {n.name}, {&n}, best, notes);
    if (best == nullptr || !options->AddMeasured(*best)) {
      unmeasured.push_back(n.name);
      options->AddProfile(i);
    }
  }
  if (options->any_measured() && !unmeasured.empty()) {
    notes->push_back(absl::StrCat(RoleName(role), ": ",
                                  absl::StrJoin(unmeasured, ", "),
                                  " not measured; profile used for them"));
  }
}

RoleChoice ChooseRole(Role role, const Resolved& where,
                      const std::vector<model::ClusterView>& profile_views,
                      const model::Traffic& traffic, const RackOf* rack_of,
                      std::vector<std::string>* notes) {
  OptionSet options(role, where, profile_views, notes);
  if (where.members.empty()) {
    options.AddProfile(0);
  } else if (role == Role::kAllToAllInter) {
    AddInterNodeOptions(where, rack_of, &options, notes);
  } else {
    AddPerNodeOptions(role, where, &options, notes);
  }
  return options.Bound(traffic);
}

uint64_t Bytes(double v) {
  return v <= 0 ? 0 : static_cast<uint64_t>(std::llround(v));
}

// Whether every node runs CPU ranks (the profile a GPU-less node gets), whose
// intra-node path is loopback rather than NVLink.
bool CpuRanks(const Resolved& where) {
  absl::StatusOr<std::string> cpu = model::ProfileNameForGpu("");
  return cpu.ok() &&
         std::all_of(
             where.node_profiles.begin(), where.node_profiles.end(),
             [&](const model::HardwareProfile* p) { return p->name == *cpu; });
}

void FillCandidate(const model::Candidate& c, bool cpu_ranks,
                   v1::Candidate* out) {
  out->set_kind(strategy::StrategyToProto(c.kind));
  out->set_chunks_requested(c.chunks_requested);
  out->set_chunks_effective(c.chunks_effective);
  out->set_feasible(c.feasible);
  if (!c.feasible) {
    out->set_infeasible_reason(c.infeasible_reason);
    return;
  }
  out->set_forward_seconds_per_layer(c.forward_seconds_per_layer);
  out->set_backward_seconds_per_layer(c.backward_seconds_per_layer);
  out->set_total_seconds_per_layer(c.total_seconds_per_layer);
  out->set_step_seconds(c.step_seconds);
  out->set_intra_node_bytes_per_rank(Bytes(c.intra_node_bytes_per_rank));
  out->set_inter_node_bytes_per_rank(Bytes(c.inter_node_bytes_per_rank));
  // The model names the busiest resource; its names are the enum's short names.
  v1::Bottleneck limited_by = FromShortName<v1::Bottleneck>(c.bottleneck)
                                  .value_or(v1::BOTTLENECK_UNSPECIFIED);
  if (cpu_ranks && limited_by == v1::BOTTLENECK_NVLINK) {
    limited_by = v1::BOTTLENECK_LOOPBACK;
  }
  out->set_limited_by(limited_by);
  out->set_speedup_over_flat(c.speedup_over_flat);
  out->set_speedup_over_tp_dedup(c.speedup_over_tp_dedup);
  out->set_predicted_step_gain_ratio(c.predicted_step_gain_ratio);
  out->set_rank(c.rank);
  out->set_alltoalls_per_layer(c.alltoalls_per_layer);
  out->set_allgathers_per_layer(c.allgathers_per_layer);
}

v1::ExpertLayout ToProtoLayout(model::ExpertLayout layout) {
  return layout == model::ExpertLayout::kTensorParallel
             ? v1::EXPERT_LAYOUT_TENSOR_PARALLEL
             : v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL;
}

// The request checked and its placement resolved, or the first error.
absl::StatusOr<Resolved> CheckRequest(const v1::StrategyRequest& request,
                                      const NodeLookup* lookup) {
  if (!request.has_job()) {
    return absl::InvalidArgumentError("job: required");
  }
  const v1::MoeJob& job = request.job();
  if (absl::Status s = ValidateJob(job); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(request.options()); !s.ok()) return s;
  absl::StatusOr<Resolved> where =
      ResolvePlacement(request.placement(), lookup);
  if (!where.ok()) return where.status();
  if (absl::Status s =
          ValidateJobOnPlacement(job, where->nodes, where->gpus_per_node);
      !s.ok()) {
    return s;
  }
  return where;
}

using RoleChoices = std::vector<std::pair<Role, RoleChoice>>;

// The cluster the model sees: per role the curve that bounds it (measured or
// the profile's), and the choices behind them for the evidence.
absl::StatusOr<model::ClusterView> BuildView(const Resolved& where,
                                             const model::Traffic& traffic,
                                             const RackOf* rack_of,
                                             RoleChoices* choices,
                                             std::vector<std::string>* notes) {
  // Profile views, one per resolved node (or the one profile).
  std::vector<model::ClusterView> profile_views;
  for (const model::HardwareProfile* p : where.node_profiles) {
    absl::StatusOr<model::ClusterView> v =
        model::ProfileClusterView(*p, where.nodes, where.gpus_per_node);
    if (!v.ok()) return absl::InternalError(v.status().message());
    profile_views.push_back(*std::move(v));
  }
  model::ClusterView view;
  view.alltoall_per_peer_latency_seconds = 0;
  schedule::LatencySourceRange& range = view.alltoall_latency_source;
  for (const model::ClusterView& v : profile_views) {
    view.alltoall_per_peer_latency_seconds =
        std::max(view.alltoall_per_peer_latency_seconds,
                 v.alltoall_per_peer_latency_seconds);
    // The narrowest sourced range flags extrapolation first.
    const schedule::LatencySourceRange& r = v.alltoall_latency_source;
    range.min_ranks = std::max(range.min_ranks, r.min_ranks);
    if (r.max_ranks > 0 &&
        (range.max_ranks == 0 || r.max_ranks < range.max_ranks)) {
      range.max_ranks = r.max_ranks;
    }
  }
  for (Role role : kRoles) {
    RoleChoice c =
        ChooseRole(role, where, profile_views, traffic, rack_of, notes);
    ForRole(view, role) = c.bound.curve;
    choices->emplace_back(role, std::move(c));
  }
  return view;
}

void FillTraffic(const model::Traffic& in, v1::Traffic* t) {
  t->set_capacity_tokens(in.capacity_tokens);
  t->set_dispatch_bytes(Bytes(in.dispatch_bytes));
  t->set_tokens_per_rank(in.tokens_per_rank);
  t->set_ep_members_on_node(in.ep_members_on_node);
  t->set_ep_group_size(in.ep_group_size);
  t->set_gpus_per_node(in.gpus_per_node);
  t->set_nodes(in.nodes);
}

// Where one role's curve came from; `notes` gains a warning when a measured
// inter-node curve ran fewer ranks per node than the job.
void FillCurveEvidence(Role role, const RoleChoice& choice,
                       const Resolved& where,
                       const model::ExtrapolationFlags& extrapolated,
                       absl::Time now, std::vector<std::string>* notes,
                       v1::CurveEvidence* ce) {
  ce->set_used_as(ToProtoRole(role));
  const v1::BandwidthCurve* m = choice.bound.measured;
  if (m == nullptr) {
    ce->set_origin(v1::EVIDENCE_SOURCE_PROFILE);
    return;
  }
  if (role == Role::kAllToAllInter &&
      choice.bound.curve.ranks_per_node() != where.gpus_per_node) {
    // The NICs are shared by the ranks of a node; a curve measured with
    // fewer ranks per node can overstate what each of the job's ranks gets.
    notes->push_back(absl::StrCat(
        "alltoall_inter: measured with ", choice.bound.curve.ranks_per_node(),
        " ranks per node, the job runs ", where.gpus_per_node,
        "; link rate per rank taken as measured"));
  }
  ce->set_origin(v1::EVIDENCE_SOURCE_MEASURED);
  for (const std::string& n : m->nodes()) ce->add_nodes(n);
  ce->set_age_seconds(
      std::max(0.0, absl::ToDoubleSeconds(now - ReceivedAt(*m))));
  ce->set_min_bytes(Bytes(choice.bound.curve.min_bytes()));
  ce->set_max_bytes(Bytes(choice.bound.curve.max_bytes()));
  ce->set_task_id(m->task_id());
  ce->set_extrapolated(ForRole(extrapolated, role));
}

void FillEvidence(const Resolved& where, const RoleChoices& choices,
                  const model::Decision& decision, absl::Time now,
                  std::vector<std::string> notes, v1::Evidence* ev) {
  std::vector<std::string> profile_names;
  std::vector<std::string> profile_versions;
  for (const model::HardwareProfile* p : where.node_profiles) {
    if (std::find(profile_names.begin(), profile_names.end(), p->name) ==
        profile_names.end()) {
      profile_names.push_back(p->name);
      profile_versions.push_back(p->version);
    }
  }
  ev->set_profile(absl::StrJoin(profile_names, ","));
  ev->set_profile_version(absl::StrJoin(profile_versions, ","));
  int measured_roles = 0;
  int profile_roles = 0;
  for (const auto& [role, choice] : choices) {
    // A single node never crosses the network: that curve is not evidence.
    if (role == Role::kAllToAllInter && where.nodes == 1) continue;
    FillCurveEvidence(role, choice, where, decision.extrapolated, now, &notes,
                      ev->add_curves());
    if (choice.any_measured) ++measured_roles;
    if (choice.any_profile) ++profile_roles;
  }
  ev->set_origin(profile_roles == 0    ? v1::EVIDENCE_SOURCE_MEASURED
                 : measured_roles == 0 ? v1::EVIDENCE_SOURCE_PROFILE
                                       : v1::EVIDENCE_SOURCE_MIXED);
  for (const std::string& n : notes) ev->add_notes(n);
  for (const std::string& n : decision.notes) ev->add_notes(n);
  if (decision.extrapolated.any()) {
    ev->add_notes(
        "measured curves were extrapolated beyond their sizes (alpha-beta "
        "fit); see curves[].extrapolated");
  }
}

// The request checked, its placement resolved and the model's inputs built:
// what PlanStrategy decides on and PreparePlan hands out.
struct Built {
  Resolved where;
  PreparedPlan plan;
  RoleChoices choices;
  std::vector<std::string> notes;
};

absl::StatusOr<Built> Build(const v1::StrategyRequest& request,
                            const NodeLookup* lookup,
                            const RackOf* rack_of = nullptr) {
  absl::StatusOr<Resolved> where = CheckRequest(request, lookup);
  if (!where.ok()) return where.status();
  Built b;
  b.where = *std::move(where);
  b.plan.job = ToJobShape(request.job());
  b.plan.shape = model::NodeShape{b.where.nodes, b.where.gpus_per_node};
  absl::StatusOr<model::Traffic> traffic =
      model::ComputeTraffic(b.plan.job, b.plan.shape);
  if (!traffic.ok())
    return absl::InvalidArgumentError(traffic.status().message());
  absl::StatusOr<model::ClusterView> view =
      BuildView(b.where, *traffic, rack_of, &b.choices, &b.notes);
  if (!view.ok()) return view.status();
  b.plan.view = *std::move(view);
  b.plan.options = ToSearchOptions(request.options());
  return b;
}

// The fabric tree priced for one plan (docs/MODEL.md §12).
struct TreePricing {
  JobFabricView job;
  model::OrderAdvice advice;
  model::RankLayout layout;
  double node_link_bytes_per_second = 0;
  bool priced = false;
};

// Where the job's nodes sit; the tree is priced only when every one of them
// is placed.
std::optional<TreePricing> PlaceInTree(const v1::StrategyRequest& request,
                                       const v1::FabricReply* tree) {
  if (tree == nullptr || request.placement().node_names_size() == 0) {
    return std::nullopt;
  }
  std::optional<JobFabricView> job =
      JobFabricFromTree(*tree, {request.placement().node_names().begin(),
                                request.placement().node_names().end()});
  if (!job) return std::nullopt;
  TreePricing t;
  t.job = *std::move(job);
  return t;
}

// Counts the uplinks' bytes for the given order and the advised one and
// puts the given order's slowest uplink into the view.
void PriceTree(PreparedPlan& plan, const model::Traffic& traffic,
               TreePricing& tree, std::vector<std::string>* notes) {
  // Nodes outside the fabric: evidence.fabric.outside (and the planner's
  // fabric note) say so; nothing is priced.
  if (!tree.job.outside.empty()) return;
  const int g = plan.shape.gpus_per_node;
  const int e = std::max(1, traffic.ep_group_size);
  const model::BandwidthCurve& inter = plan.view.alltoall_inter;
  tree.node_link_bytes_per_second =
      inter.LinkRateAt(traffic.dispatch_bytes * inter.nranks() / e)
          .bytes_per_second *
      g;
  ResolveCapacities(tree.node_link_bytes_per_second, tree.job);
  tree.layout = {g, std::max(1, traffic.tensor_parallel_size), e};
  absl::StatusOr<model::OrderAdvice> advice =
      model::AdviseOrder(tree.job.fabric, tree.layout);
  if (!advice.ok()) {
    notes->push_back(
        absl::StrCat("fabric: not priced: ", advice.status().message()));
    return;
  }
  tree.advice = *std::move(advice);
  tree.priced = true;
  plan.view.uplink_seconds_per_rank_byte =
      tree.advice.given.seconds_per_rank_byte();
  plan.view.uplink_steady_seconds_per_rank_byte =
      tree.advice.given.steady_seconds_per_rank_byte();
  if (plan.view.uplink_steady_seconds_per_rank_byte <
      plan.view.uplink_seconds_per_rank_byte) {
    const model::UplinkLoad& u = tree.advice.given.uplinks.front();
    notes->push_back(absl::StrCat(
        "fabric: a pipeline's chunks after the first cross the uplinks at "
        "their declared capacity (the slowest, ",
        u.level == model::UplinkLevel::kRack
            ? tree.job.fabric.racks[u.index].name
            : tree.job.fabric.blocks[u.index].name,
        ": ", absl::SixDigits(u.declared_bytes_per_second / 1e6),
        " MB/s declared, ", absl::SixDigits(u.bytes_per_second / 1e6),
        " MB/s measured for one AllToAll alone); docs/MODEL.md §12"));
  }
  for (const model::UplinkLoad& u : tree.advice.given.uplinks) {
    if (u.bytes_per_second > 0) continue;
    notes->push_back(absl::StrCat(
        "fabric: the uplink of ",
        u.level == model::UplinkLevel::kRack ? "rack " : "block ",
        u.level == model::UplinkLevel::kRack
            ? tree.job.fabric.racks[u.index].name
            : tree.job.fabric.blocks[u.index].name,
        " carries the job's traffic but is neither measured nor declared: "
        "not priced"));
  }
}

// The node's own link as a priced level: its rate from the inter-node
// curve that bounds the plan, and that curve's task.
v1::FabricLevelLoad NodeLinkLoad(const TreePricing& tree,
                                 const model::Traffic& traffic,
                                 const RoleChoices& choices) {
  v1::FabricLevelLoad out;
  out.set_level(v1::FABRIC_LEVEL_NODE_LINK);
  out.set_bytes_per_second(tree.node_link_bytes_per_second);
  for (const auto& [role, choice] : choices) {
    if (role != Role::kAllToAllInter || choice.bound.measured == nullptr) {
      continue;
    }
    out.set_name(absl::StrJoin(choice.bound.measured->nodes(), ","));
    out.set_task_id(choice.bound.measured->task_id());
  }
  if (out.name().empty()) out.set_name(absl::StrCat("profile"));
  const double per_rank = traffic.inter_node_share;
  out.set_bytes_per_rank_byte(per_rank * traffic.gpus_per_node);
  if (tree.node_link_bytes_per_second > 0) {
    out.set_dispatch_seconds(out.bytes_per_rank_byte() *
                             traffic.dispatch_bytes /
                             tree.node_link_bytes_per_second);
  }
  return out;
}

// Which level bounds a candidate's network time: the uplink when the tree's
// slowest uplink took longer than the node's link over the layer.
std::optional<v1::FabricLevelLoad> BoundOf(const TreePricing& tree,
                                           const model::FabricPrice& price,
                                           const model::Candidate& c,
                                           const v1::FabricLevelLoad& node,
                                           double dispatch_bytes) {
  if (c.node_link_seconds_per_layer <= 0 && c.uplink_seconds_per_layer <= 0) {
    return std::nullopt;
  }
  if (c.uplink_seconds_per_layer > c.node_link_seconds_per_layer &&
      !price.uplinks.empty()) {
    return UplinkProto(tree.job, price.uplinks.front(), dispatch_bytes);
  }
  return node;
}

// The best candidate and one flat dispatch under `price`.
struct OrderTimes {
  double seconds_per_layer = 0;
  v1::StrategyKind kind = v1::STRATEGY_KIND_UNSPECIFIED;
  double flat_dispatch_seconds = 0;
  std::optional<v1::FabricLevelLoad> flat_bound;
};

OrderTimes TimesWith(const PreparedPlan& plan, const TreePricing& tree,
                     const model::FabricPrice& price,
                     const v1::FabricLevelLoad& node) {
  OrderTimes out;
  model::ClusterView view = plan.view;
  view.uplink_seconds_per_rank_byte = price.seconds_per_rank_byte();
  view.uplink_steady_seconds_per_rank_byte =
      price.steady_seconds_per_rank_byte();
  absl::StatusOr<model::Decision> best =
      model::Decide(plan.job, plan.shape, view, plan.options);
  if (best.ok() && best->chosen >= 0) {
    const model::Candidate& c = best->candidates[best->chosen];
    out.seconds_per_layer = c.total_seconds_per_layer;
    out.kind = strategy::StrategyToProto(c.kind);
  }
  model::SearchOptions flat_only = plan.options;
  flat_only.allowed = {model::StrategyKind::kFlat};
  absl::StatusOr<model::Decision> flat =
      model::Decide(plan.job, plan.shape, view, flat_only);
  if (flat.ok() && flat->chosen >= 0) {
    const model::Candidate& c = flat->candidates[flat->chosen];
    out.flat_dispatch_seconds = c.ops.dispatch_forward_seconds;
    out.flat_bound = BoundOf(tree, price, c, node,
                             best.ok() ? best->traffic.dispatch_bytes : 0);
  }
  return out;
}

void FillFabric(const PreparedPlan& plan, const model::Decision& decision,
                const RoleChoices& choices, const TreePricing& tree,
                v1::StrategyReply* reply) {
  v1::FabricEvidence* ev = reply->mutable_evidence()->mutable_fabric();
  for (const std::string& n : tree.job.outside) ev->add_outside(n);
  if (!tree.priced) return;
  const model::Traffic& traffic = decision.traffic;
  const double d = traffic.dispatch_bytes;
  for (const model::UplinkLoad& u : tree.advice.given.uplinks) {
    *ev->add_uplinks() = UplinkProto(tree.job, u, d);
  }
  const v1::FabricLevelLoad node = NodeLinkLoad(tree, traffic, choices);
  for (size_t i = 0; i < decision.candidates.size(); ++i) {
    const model::Candidate& c = decision.candidates[i];
    if (!c.feasible) continue;
    std::optional<v1::FabricLevelLoad> bound =
        BoundOf(tree, tree.advice.given, c, node, d);
    if (bound) *reply->mutable_candidates(i)->mutable_fabric_bound() = *bound;
  }
  if (decision.chosen >= 0) {
    *reply->mutable_chosen() = reply->candidates(decision.chosen);
  }
  v1::RankOrderAdvice* advice = reply->mutable_rank_order();
  for (int i : tree.advice.order) advice->add_nodes(tree.job.nodes[i]);
  advice->set_ranks_per_node(plan.shape.gpus_per_node);
  const OrderTimes given = TimesWith(plan, tree, tree.advice.given, node);
  const OrderTimes advised =
      tree.advice.changed ? TimesWith(plan, tree, tree.advice.advised, node)
                          : given;
  advice->set_given_seconds_per_layer(given.seconds_per_layer);
  advice->set_advised_seconds_per_layer(advised.seconds_per_layer);
  advice->set_advised_kind(advised.kind);
  advice->set_given_dispatch_seconds(given.flat_dispatch_seconds);
  advice->set_advised_dispatch_seconds(advised.flat_dispatch_seconds);
  if (given.flat_bound) *advice->mutable_given_bound() = *given.flat_bound;
  if (advised.flat_bound)
    *advice->mutable_advised_bound() = *advised.flat_bound;
  advice->set_note(
      AdviceNote(tree.job, tree.advice,
                 tree.layout.tensor_parallel * tree.layout.expert_parallel,
                 tree.layout.ranks_per_node));
}

// The model's inputs with the fabric tree priced for the given order: what
// PlanStrategy decides on and PreparePlan hands out (verify's predictions and
// the calibration fits), one path for both.
struct Priced {
  Built built;
  std::optional<TreePricing> tree;
};

absl::StatusOr<Priced> BuildPriced(const v1::StrategyRequest& request,
                                   const NodeLookup* lookup) {
  Priced p;
  p.tree = PlaceInTree(request, lookup != nullptr ? lookup->Fabric() : nullptr);
  const bool all_placed = p.tree && p.tree->job.outside.empty();
  absl::StatusOr<Built> b =
      Build(request, lookup, all_placed ? &p.tree->job.rack_of : nullptr);
  if (!b.ok()) return b.status();
  p.built = *std::move(b);
  if (p.tree) {
    PreparedPlan& plan = p.built.plan;
    absl::StatusOr<model::Traffic> traffic =
        model::ComputeTraffic(plan.job, plan.shape);
    if (traffic.ok()) PriceTree(plan, *traffic, *p.tree, &p.built.notes);
  }
  return p;
}

}  // namespace

// Check and resolve, build the model's view, decide, render the reply. The
// decision's duration is the caller's to measure (decision_seconds): only
// `now` is read here, so a reply depends on its inputs alone.
absl::StatusOr<v1::StrategyReply> PlanStrategy(
    const v1::StrategyRequest& request, const NodeLookup* lookup,
    absl::Time now, const PlanCalibration* calibration) {
  absl::StatusOr<Priced> priced = BuildPriced(request, lookup);
  if (!priced.ok()) return priced.status();
  Built* b = &priced->built;
  std::optional<TreePricing>& tree = priced->tree;
  PreparedPlan& plan = b->plan;
  if (calibration != nullptr) {
    plan.view.calibration = calibration->model;
    if (request.options().contention_factor() == 0) {
      plan.options.contention_factor = calibration->contention_factor;
    }
  }
  absl::StatusOr<model::Decision> decision =
      model::Decide(plan.job, plan.shape, plan.view, plan.options);
  if (!decision.ok()) {
    return absl::InvalidArgumentError(decision.status().message());
  }

  v1::StrategyReply reply;
  reply.set_expert_layout(ToProtoLayout(decision->layout));
  FillTraffic(decision->traffic, reply.mutable_traffic());
  for (const model::Candidate& c : decision->candidates) {
    FillCandidate(c, CpuRanks(b->where), reply.add_candidates());
  }
  if (decision->chosen >= 0) {
    *reply.mutable_chosen() = reply.candidates(decision->chosen);
  }
  FillEvidence(b->where, b->choices, *decision, now, std::move(b->notes),
               reply.mutable_evidence());
  if (calibration != nullptr) {
    *reply.mutable_evidence()->mutable_calibration() = calibration->evidence;
  }
  if (tree) FillFabric(plan, *decision, b->choices, *tree, &reply);
  return reply;
}

absl::StatusOr<PreparedPlan> PreparePlan(const v1::StrategyRequest& request,
                                         const NodeLookup* lookup) {
  absl::StatusOr<Priced> p = BuildPriced(request, lookup);
  if (!p.ok()) return p.status();
  return std::move(p->built.plan);
}

namespace {

// The candidate of `kind` with exactly `chunks`, priced as `scope` measures
// it (see PredictMeasuredSeconds); nullopt when it cannot run for the job.
std::optional<model::Candidate> MeasuredCandidate(
    const PreparedPlan& plan, MeasuredScope scope, strategy::StrategyKind kind,
    int chunks, const model::ModelCalibration& calibration,
    double contention_factor) {
  model::ClusterView view = plan.view;
  view.calibration = calibration;
  model::SearchOptions options = plan.options;
  options.allowed = {kind};
  options.fixed_chunks = std::max(1, chunks);
  options.contention_factor = std::max(1.0, contention_factor);
  model::MoeJobShape job = plan.job;
  if (scope == MeasuredScope::kDispatchOp) {
    // The op scope runs the tensor-parallel layout's dispatch op
    // (agent/bench/schedule.h, Step::kExchange: flat sends the whole D, the
    // dedup strategies gather), whatever the job's layout: predict that op.
    job.expert_layout = model::ExpertLayout::kTensorParallel;
  }
  absl::StatusOr<model::Decision> d =
      model::Decide(job, plan.shape, view, options);
  if (!d.ok() || d->chosen < 0) return std::nullopt;
  return d->candidates[d->chosen];
}

}  // namespace

std::optional<double> PredictMeasuredSeconds(
    const PreparedPlan& plan, MeasuredScope scope, strategy::StrategyKind kind,
    int chunks, const model::ModelCalibration& calibration,
    double contention_factor) {
  const std::optional<model::Candidate> c = MeasuredCandidate(
      plan, scope, kind, chunks, calibration, contention_factor);
  if (!c) return std::nullopt;
  return scope == MeasuredScope::kLayer ? c->total_seconds_per_layer
                                        : c->ops.dispatch_forward_seconds;
}

int ChunkBound(const PreparedPlan& plan, MeasuredScope scope,
               strategy::StrategyKind kind,
               const model::ModelCalibration& calibration,
               double contention_factor) {
  const std::optional<model::Candidate> c =
      MeasuredCandidate(plan, scope, kind, 1, calibration, contention_factor);
  return c ? c->chunks_resolved_max : 0;
}

std::vector<v1::HardwareProfile> ListProfiles() {
  std::vector<v1::HardwareProfile> out;
  for (const model::HardwareProfile& p : model::BuiltinProfiles()) {
    out.push_back(ProfileToProto(p));
  }
  return out;
}

}  // namespace monta::planning
