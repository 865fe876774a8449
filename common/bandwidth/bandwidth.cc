#include "common/bandwidth/bandwidth.h"

#include <algorithm>
#include <cstddef>

namespace monta::bandwidth {

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

double AlgBwBytesPerSecond(double message_bytes, double time_seconds) {
  if (time_seconds <= 0) return 0;
  return message_bytes / time_seconds;
}

double BusBwFactor(Collective collective, int nranks) {
  switch (collective) {
    case Collective::kAllToAll:
    case Collective::kAllGather:
      if (nranks <= 1) return 0;
      return static_cast<double>(nranks - 1) / nranks;
    case Collective::kCopy:
      return 1;
  }
  return 0;
}

double BusBwBytesPerSecond(Collective collective, int nranks,
                           double message_bytes, double time_seconds) {
  return AlgBwBytesPerSecond(message_bytes, time_seconds) *
         BusBwFactor(collective, nranks);
}

double TimeFromBusBwSeconds(Collective collective, int nranks,
                            double message_bytes,
                            double busbw_bytes_per_second) {
  const double factor = BusBwFactor(collective, nranks);
  if (busbw_bytes_per_second <= 0 || factor <= 0) return 0;
  const double algbw_bytes_per_second = busbw_bytes_per_second / factor;
  return message_bytes / algbw_bytes_per_second;
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

}  // namespace monta::bandwidth
