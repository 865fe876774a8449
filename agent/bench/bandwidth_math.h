// The one place for nccl-tests' bandwidth definitions (REFERENCES.md §A1,
// NVIDIA/nccl-tests doc/PERFORMANCE.md). Everything in Monta that turns a
// measured time into a bandwidth, or back, goes through here.
#ifndef MONTA_AGENT_BENCH_BANDWIDTH_MATH_H_
#define MONTA_AGENT_BENCH_BANDWIDTH_MATH_H_

#include <cstdint>
#include <vector>

namespace monta::bench {

enum class Collective {
  kAllToAll,
  kAllGather,
  kCopy,
};

const char* CollectiveName(Collective collective);

// algbw = bytes / time, where bytes is what nccl-tests calls the size: for
// AllToAll the bytes each rank sends (its whole send buffer), for AllGather the
// gathered output, for a copy the bytes copied. Returns 0 for time <= 0.
double AlgBwBytesPerSecond(uint64_t bytes, double time_seconds);

// busbw / algbw: (n-1)/n for AllToAll and AllGather, 1 for copies.
double BusBwFactor(Collective collective, int nranks);

double BusBwBytesPerSecond(Collective collective, uint64_t bytes,
                           double time_seconds, int nranks);

// Median of `samples` (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> samples);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_BANDWIDTH_MATH_H_
