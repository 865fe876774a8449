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

std::vector<uint64_t> SweepSizes(uint64_t min_bytes, uint64_t max_bytes,
                                 int step_factor) {
  std::vector<uint64_t> sizes;
  if (min_bytes == 0) min_bytes = 1;
  const uint64_t step = static_cast<uint64_t>(std::max(2, step_factor));
  for (uint64_t b = min_bytes; b <= max_bytes; b *= step) {
    sizes.push_back(b);
    if (b > max_bytes / step) break;
  }
  return sizes;
}

CollectiveBuffers BuffersFor(Collective collective, int nranks, uint64_t size) {
  const uint64_t n = static_cast<uint64_t>(std::max(1, nranks));
  const uint64_t block = std::max<uint64_t>(1, size / n);
  CollectiveBuffers b;
  switch (collective) {
    case Collective::kAllToAll:
      b.in_bytes = b.out_bytes = b.message_bytes = block * n;
      break;
    case Collective::kAllGather:
      b.in_bytes = block;
      b.out_bytes = b.message_bytes = block * n;
      break;
    case Collective::kCopy:
      b.in_bytes = b.out_bytes = b.message_bytes = size;
      break;
  }
  return b;
}

std::vector<uint64_t> SweepMessageBytes(Collective collective, int nranks,
                                        uint64_t min_bytes, uint64_t max_bytes,
                                        int step_factor) {
  std::vector<uint64_t> out;
  for (uint64_t size : SweepSizes(min_bytes, max_bytes, step_factor)) {
    const uint64_t bytes = BuffersFor(collective, nranks, size).message_bytes;
    if (out.empty() || bytes > out.back()) out.push_back(bytes);
  }
  return out;
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
