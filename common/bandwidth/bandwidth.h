// nccl-tests' bandwidth definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md),
// held once for the agent, the planner's model, montactl and the benchmarks.
// Everything in Monta that turns a measured time into a bandwidth, or a
// bandwidth back into a time, goes through here.
//
// Pure C++ and Abseil: no protobuf, so the model may use it. The conversion
// to and from monta.v1.Collective lives at the edge, in collective_proto.h.
#ifndef MONTA_COMMON_BANDWIDTH_BANDWIDTH_H_
#define MONTA_COMMON_BANDWIDTH_BANDWIDTH_H_

#include <cstdint>
#include <vector>

namespace monta::bandwidth {

// The collectives Monta measures and models. The values are the numbers of
// monta.v1.Collective (collective_proto.cc asserts it at compile time), so a
// number means the same thing on the wire and in memory; 0 (unspecified) has
// no enumerator because no computation can use it.
enum class Collective : int {
  kAllToAll = 1,
  kAllGather = 2,
  kCopy = 3,
};

// "alltoall", "allgather", "copy": log messages and metric labels.
const char* CollectiveName(Collective collective);

// algbw = bytes / time, where bytes is what nccl-tests calls the size: for
// AllToAll the bytes each rank sends (its whole send buffer), for AllGather
// the gathered output, for a copy the bytes copied. 0 when time <= 0.
double AlgBwBytesPerSecond(double message_bytes, double time_seconds);

// busbw / algbw. (n-1)/n for AllToAll and AllGather: of the n blocks a rank
// sends (or gathers) one stays local. 1 for copies.
//
// One rank (or fewer): 0 for AllToAll and AllGather, as nccl-tests computes
// it; nothing crosses the bus, so a busbw of 0 is the honest number, and
// TimeFromBusBwSeconds refuses to invert it rather than divide by zero.
double BusBwFactor(Collective collective, int nranks);

// busbw = algbw * BusBwFactor.
double BusBwBytesPerSecond(Collective collective, int nranks,
                           double message_bytes, double time_seconds);

// Inverse of BusBwBytesPerSecond: the time a busbw implies for
// `message_bytes`. 0 ("unknown") when busbw <= 0 or the factor is 0 (one
// rank), because no time is implied then.
double TimeFromBusBwSeconds(Collective collective, int nranks,
                            double message_bytes,
                            double busbw_bytes_per_second);

// The sizes of a nccl-tests-style sweep: min, min*step, ... while <= max (a
// step below 2 counts as 2, a min of 0 as 1).
std::vector<uint64_t> SweepSizes(uint64_t min_bytes, uint64_t max_bytes,
                                 int step_factor);

// What one rank of `nranks` moves for sweep size `size` of `collective`: its
// input and output buffers and the nccl-tests size the point is reported at.
// AllToAll: size rounded down to whole blocks of one per rank (at least 1
// byte each) in and out; AllGather: one such block in, all of them out; copy:
// `size` both ways.
struct CollectiveBuffers {
  uint64_t in_bytes = 0;
  uint64_t out_bytes = 0;
  uint64_t message_bytes = 0;
};
CollectiveBuffers BuffersFor(Collective collective, int nranks, uint64_t size);

// The message sizes a sweep of `collective` over `nranks` ranks reports:
// BuffersFor(SweepSizes(...)).message_bytes, strictly increasing (a size that
// rounds to the previous one is measured once). The agent sweeps exactly
// these and the planner expects exactly these in a node's report.
std::vector<uint64_t> SweepMessageBytes(Collective collective, int nranks,
                                        uint64_t min_bytes, uint64_t max_bytes,
                                        int step_factor);

// The median of `samples` (the mean of the middle two for an even count); 0
// if empty. nccl-tests-style sweeps report the median of the timed
// iterations.
double Median(std::vector<double> samples);

}  // namespace monta::bandwidth

#endif  // MONTA_COMMON_BANDWIDTH_BANDWIDTH_H_
