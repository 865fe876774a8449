// Checks a StrategyRequest's fields before anything is computed. Every error
// is INVALID_ARGUMENT and names the field and what was expected, e.g.
// "job.top_k: must be in 1..num_experts (8), got 9".

#ifndef MONTA_SERVER_PLANNING_REQUEST_VALIDATION_H_
#define MONTA_SERVER_PLANNING_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/strategy_search.h"
#include "server/model/traffic.h"

namespace monta::planning {

// Largest dispatch bytes per rank D the planner accepts; beyond it the job
// cannot fit in any GPU's memory and the request is almost surely a typo.
inline constexpr double kMaxDispatchBytesPerRank = 64.0 * (1ull << 30);

// Entries of options.allowed (there are 5 strategy kinds; a few repeats are
// harmless, 200,000 are not).
inline constexpr int kMaxAllowedEntries = 16;

// Rules that need only the job itself (sizes, ranges, divisibility).
absl::Status ValidateJob(const monta::v1::MoeJob& job);

// max_chunks, contention_factor, allowed kinds (at most kMaxAllowedEntries).
absl::Status ValidateOptions(const monta::v1::StrategyOptions& options);

// Rules that need the resolved placement: world == nodes x G, t divides G,
// e x t fits the world, and D per rank under kMaxDispatchBytesPerRank.
absl::Status ValidateJobOnPlacement(const monta::v1::MoeJob& job, int nodes,
                                    int gpus_per_node);

// The model's view of a validated job (defaults applied: 0 -> 1 where the
// proto says so).
monta::model::MoeJobShape ToJobShape(const monta::v1::MoeJob& job);

// The model's options from validated proto options.
monta::model::SearchOptions ToSearchOptions(
    const monta::v1::StrategyOptions& options);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_REQUEST_VALIDATION_H_
