// The cluster's fabric as the planner knows it: where each node sits (block,
// rack, host), who said so, and what is declared of each uplink.
//
// Trust, highest first:
//   1. the operator's fabric map (--fabric_map_file, fabric_map.h);
//   2. the nodes' Kubernetes labels (--fabric_node_labels_file, a NodeList a
//      read-only sidecar refreshes; node_labels.h), for nodes the map does
//      not name;
//   3. nothing: the node is outside the fabric and keeps pair measurements.
// What a node's agent says of itself (its reported topology labels) is only a
// hint: shown, compared, flagged where it disagrees, and never used, so a
// node cannot move itself into another rack.
//
// Both files are re-read when they change (Refresh, called by the planner
// every --fabric_refresh_seconds). At start a file that does not parse is an
// error (the planner stops with one line); later it keeps the previous
// content in use, and its status says why. A node labels file that does not
// exist yet (its sidecar has not written it) is not an error at start.
#ifndef MONTA_SERVER_FABRIC_FABRIC_H_
#define MONTA_SERVER_FABRIC_FABRIC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/monta/v1/fabric.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "server/fabric/fabric_map.h"
#include "server/fabric/levels.h"
#include "server/fabric/node_labels.h"
#include "server/fabric/source_file.h"

namespace monta::fabric {

struct FabricOptions {
  // Empty: no such source.
  std::string map_file;
  std::string node_labels_file;
  LabelKeys label_keys = DefaultLabelKeys();
  FabricLimits limits;
};

class Fabric {
 public:
  // Reads the configured files. Errors begin with the flag and the path
  // ("--fabric_map_file /etc/monta/fabric/map.yaml: line 3: racks[0]: ...").
  static absl::StatusOr<std::unique_ptr<Fabric>> Open(FabricOptions options,
                                                      absl::Time now);

  // One source's re-read.
  struct Reload {
    monta::v1::FabricSource source = monta::v1::FABRIC_SOURCE_UNSPECIFIED;
    // The flag, for messages: "--fabric_map_file".
    std::string flag;
    // OK, or why the file in place is not used (the previous content stays).
    absl::Status status;
    // The content in use changed.
    bool changed = false;
    // Nodes the content in use names.
    int nodes = 0;
  };
  // Re-reads the files that changed since the last call; one Reload per file
  // that was read. One caller at a time (the planner's maintenance thread).
  std::vector<Reload> Refresh(absl::Time now);

  // True when a map or a node labels file is configured.
  bool has_sources() const {
    return !options_.map_file.empty() || !options_.node_labels_file.empty();
  }

  // Where `node` sits, and what its agent's `agent_labels` (its reported
  // topology labels) claim.
  monta::v1::FabricPosition Position(
      absl::string_view node,
      const std::map<std::string, std::string>& agent_labels) const;
  // The same for a registered node (its topology's labels).
  monta::v1::FabricPosition PositionOf(const monta::v1::NodeInfo& node) const;

  // The tree: every node the map names, every registered node the node
  // labels place (the labels describe the whole Kubernetes cluster, most of
  // which Monta does not run on), and the registered nodes no source places;
  // each level's measurement from the registered nodes' curves
  // (AttachMeasurements) and the last level round's notes. `registered` as
  // Registry::List gives them.
  monta::v1::FabricReply Tree(
      const std::vector<monta::v1::NodeInfo>& registered) const;

  // For a plan's evidence: where the job's nodes sit and who placed them,
  // e.g. "fabric: rack r0 (fabric map): a, b; rack leaf-5 (node labels): c;
  // outside the fabric: x. With nodes outside the fabric the uplinks are not
  // priced: ..." (or "The uplinks are priced (docs/MODEL.md §12)" when every
  // node is placed). nullopt without sources or nodes.
  std::optional<std::string> EvidenceNote(
      const std::vector<std::string>& nodes) const;

  // Where a benchmark over `nodes` runs in the fabric (levels.h): NODE for
  // one node; RACK, CROSS_RACK or CROSS_BLOCK when a source places every node
  // and they sit in one or two racks; UNSPECIFIED (no racks) otherwise.
  monta::v1::FabricSpan SpanOf(const std::vector<std::string>& nodes) const;

  // One round of level measurements (levels.h) over the alive registered
  // nodes a source places, `idle` saying which are free now. `outside`: the
  // alive idle nodes no source places, by name (they keep pair
  // measurements). Unless `dry_run` the round counts (the racks' samples
  // rotate) and its notes stay for the tree (Tree's notes).
  struct Round {
    LevelPlan plan;
    std::vector<std::string> outside;
  };
  Round PlanRound(const std::vector<monta::v1::NodeInfo>& registered,
                  const std::function<bool(const std::string&)>& idle,
                  int sample_nodes, bool dry_run, absl::Time now);

  // The configured sources and what is in use from each.
  std::vector<monta::v1::FabricSourceStatus> Sources() const;

  // Reads of each configured source's file since Open (at Open and each time
  // it changed), by result: ok, or error (the previous content stayed).
  struct LoadCount {
    monta::v1::FabricSource source = monta::v1::FABRIC_SOURCE_UNSPECIFIED;
    int64_t ok = 0;
    int64_t error = 0;
  };
  std::vector<LoadCount> LoadCounts() const;

 private:
  // What one source holds.
  struct SourceState {
    monta::v1::FabricSource source;
    std::string flag;
    std::optional<absl::Time> loaded_at;
    std::string error;
    size_t content_hash = 0;
    int nodes = 0;
    int racks = 0;
    int64_t loads_ok = 0;
    int64_t loads_error = 0;
  };
  // The content in use, replaced whole on a change.
  struct View {
    std::shared_ptr<const FabricMap> map;      // null: none
    std::shared_ptr<const NodeLabels> labels;  // null: none (yet)
  };

  explicit Fabric(FabricOptions options);
  // Reads `file` if it changed and, when its content is new and parses,
  // puts it in use; nullopt when the file did not change.
  std::optional<Reload> Apply(SourceFile& file, monta::v1::FabricSource source,
                              absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Parses `content` of `source` and puts it in use.
  absl::Status Install(monta::v1::FabricSource source,
                       const std::string& content, size_t content_hash,
                       absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  SourceState& StateOf(monta::v1::FabricSource source)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  View Current() const ABSL_LOCKS_EXCLUDED(mu_);
  // Tree's tail: the sources' statuses, and notes for people.
  void AddSourcesAndNotes(int unplaced, monta::v1::FabricReply& reply) const
      ABSL_LOCKS_EXCLUDED(mu_);
  monta::v1::FabricPosition PositionIn(
      const View& view, absl::string_view node,
      const std::map<std::string, std::string>& agent_labels) const;

  const FabricOptions options_;
  // Read and written by Refresh (one caller at a time) and Open only.
  std::unique_ptr<SourceFile> map_file_;
  std::unique_ptr<SourceFile> labels_file_;

  mutable absl::Mutex mu_;
  View view_ ABSL_GUARDED_BY(mu_);
  SourceState map_state_ ABSL_GUARDED_BY(mu_);
  SourceState labels_state_ ABSL_GUARDED_BY(mu_);
  // Level rounds planned (not dry runs), and the last one's time and notes.
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Time> round_at_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> round_notes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace monta::fabric

#endif  // MONTA_SERVER_FABRIC_FABRIC_H_
