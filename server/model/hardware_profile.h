// Built-in hardware profiles: the constants the model uses for a node class
// when nothing has been measured. Every constant carries its public source,
// both here in code and in `constants`, so the API can show it.

#ifndef MONTA_SERVER_MODEL_HARDWARE_PROFILE_H_
#define MONTA_SERVER_MODEL_HARDWARE_PROFILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace monta::model {

struct ProfileConstant {
  std::string name;
  double value = 0;
  std::string unit;    // "bytes_per_second", "seconds", "count", "ratio"
  std::string source;  // public source or "assumption: why"
};

struct HardwareProfile {
  std::string name;     // e.g. "a800-hgx"
  std::string version;  // bumped whenever a constant changes
  std::string description;

  int gpus_per_node = 0;  // ranks per node (CPU ranks for cpu-gloo)
  int nics_per_node = 0;
  double nic_bytes_per_second = 0;  // per NIC, per direction
  // Intra-node fabric line rate per GPU per direction (NVLink, or loopback).
  double nvlink_bytes_per_second = 0;
  // Achieved fractions of line rate for collectives.
  double nvlink_efficiency = 0;
  double nic_efficiency = 0;
  // Device memory bandwidth; a copy reads and writes every byte.
  double memory_bytes_per_second = 0;
  double copy_efficiency = 0;
  // Launch latencies: AllToAll with 8 ranks, each extra peer of an AllToAll,
  // AllGather, copy.
  double alltoall_latency_seconds = 0;
  double alltoall_per_peer_latency_seconds = 0;
  double allgather_latency_seconds = 0;
  double copy_latency_seconds = 0;
  // Smallest and largest AllToAll groups the per-peer latency was sourced on
  // (the source's runs, not constants the model uses); 0 = an assumption with
  // no range. Groups outside them are flagged in the decision.
  int alltoall_per_peer_latency_source_min_ranks = 0;
  int alltoall_per_peer_latency_source_max_ranks = 0;

  // Every constant above with unit and source, in declaration order.
  std::vector<ProfileConstant> constants;

  // Derived link rates the model uses (bytes per second per GPU).
  double IntraNodeLinkBytesPerSecond() const;  // NVLink x efficiency
  double InterNodeLinkBytesPerSecond() const;  // NIC share per GPU
  double CopyBytesPerSecond() const;           // memory / 2 x efficiency
};

// All built-in profiles, in a stable order.
const std::vector<HardwareProfile>& BuiltinProfiles();

// NOT_FOUND naming the known profiles when `name` is not one of them (not
// `name` itself: the caller names its input, bounded, see common/echo.h).
absl::StatusOr<HardwareProfile> FindProfile(absl::string_view name);

// The built-in profile called `name` (static storage, no copy), or NOT_FOUND as
// FindProfile. For hot paths: a profile carries dozens of sourced strings.
absl::StatusOr<const HardwareProfile*> LookupProfile(absl::string_view name);

// The profile of a node: `declared` (its topology's profile_name) when set,
// else the one its GPU name implies, cpu-gloo without GPUs. INVALID_ARGUMENT
// for GPUs without a name, NOT_FOUND for an unknown declared name or GPU.
absl::StatusOr<const HardwareProfile*> ProfileForNode(
    absl::string_view declared, int gpu_count, absl::string_view gpu_name);

// Profile name for a GPU marketing name ("NVIDIA A800-SXM4-80GB" ->
// "a800-hgx"); "cpu-gloo" for an empty name (a node without GPUs).
// NOT_FOUND when the GPU has no built-in profile.
absl::StatusOr<std::string> ProfileNameForGpu(absl::string_view gpu_name);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_HARDWARE_PROFILE_H_
