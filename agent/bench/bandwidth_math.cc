#include "agent/bench/bandwidth_math.h"

#include <algorithm>

namespace monta::bench {

const char* CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kCopy:
      return "copy";
  }
  return "unknown";
}

double AlgBwBytesPerSecond(uint64_t bytes, double time_seconds) {
  if (time_seconds <= 0) return 0;
  return static_cast<double>(bytes) / time_seconds;
}

double BusBwFactor(Collective collective, int nranks) {
  switch (collective) {
    case Collective::kAllToAll:
    case Collective::kAllGather:
      // Of the n blocks a rank sends (or gathers), one stays local.
      if (nranks < 1) return 0;
      return static_cast<double>(nranks - 1) / nranks;
    case Collective::kCopy:
      return 1;
  }
  return 0;
}

double BusBwBytesPerSecond(Collective collective, uint64_t bytes,
                           double time_seconds, int nranks) {
  return AlgBwBytesPerSecond(bytes, time_seconds) *
         BusBwFactor(collective, nranks);
}

double Median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  const double lower =
      *std::max_element(samples.begin(), samples.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace monta::bench
