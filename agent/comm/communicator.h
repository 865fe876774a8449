// The one interface the agent's benchmark schedules use to move bytes between
// ranks. Two implementations: NCCL on GPUs (device memory) and Gloo over TCP on
// CPUs (host memory). Schedules never see either library directly.
//
// Execution model (the same for both backends, so a schedule written once runs
// and overlaps the same way on both):
//  - Every operation is asynchronous and returns a Work handle.
//  - An operation runs on one of the communicator's streams
//  (OpOptions::stream).
//    Operations on one stream run in issue order; operations on different
//    streams may run concurrently. NCCL: a CUDA stream each. Gloo: a worker
//    thread and a separate Gloo context (its own TCP pairs) each, because Gloo
//    collectives block their caller and share nothing across contexts.
//  - An operation starts only after every handle in OpOptions::after has
//    completed, without blocking the issuing thread (NCCL: cudaStreamWaitEvent;
//    Gloo: the worker thread waits). Handles from other communicators of the
//    same backend are allowed, which is how a pipeline chains an EP-group
//    AllToAll into a TP-group AllGather.
//  - Collectives are issued in the same order on every member, per stream.
//  - Every operation is bounded by the communicator's operation timeout; a
//    failure or timeout poisons the communicator (later operations fail fast
//    with the first error), and Abort() fails everything still pending.
#ifndef MONTA_AGENT_COMM_COMMUNICATOR_H_
#define MONTA_AGENT_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace monta::comm {

// Where a communicator's buffers live.
enum class MemoryKind {
  kHost,    // ordinary host memory (Gloo)
  kDevice,  // memory of the rank's GPU (NCCL)
};

// Handle of one asynchronous operation. Thread-safe; may be waited on more than
// once (every call returns the same status).
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished, failed, timed out or was aborted.
  virtual absl::Status Wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

struct OpOptions {
  // Stream index in [0, num_streams()).
  int stream = 0;
  // Operations that must complete before this one starts.
  std::vector<WorkPtr> after;
};

// One point-to-point transfer of a grouped send/recv.
struct PeerTransfer {
  int peer = 0;  // rank in this communicator
  void* buffer = nullptr;
  size_t bytes = 0;
};

// Buffer owned by a communicator's memory kind; freed on destruction.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size_bytes() const = 0;
};

// What every backend's Create checks before it touches the network: `rank`
// inside a group of at least one, and at least one stream.
inline absl::Status CheckGroupArgs(int rank, int size, int num_streams) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, ", size, ")"));
  }
  if (num_streams < 1) {
    return absl::InvalidArgumentError("num_streams must be >= 1");
  }
  return absl::OkStatus();
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int num_streams() const = 0;
  virtual MemoryKind memory_kind() const = 0;

  // AllToAll with equal splits: block j of `send` (bytes_per_peer bytes at
  // offset j*bytes_per_peer) goes to rank j and lands in block `rank()` of its
  // `recv`. Both buffers hold size()*bytes_per_peer bytes and must stay live
  // until the handle completes.
  virtual WorkPtr AllToAll(const void* send, void* recv, size_t bytes_per_peer,
                           const OpOptions& options = {}) = 0;

  // AllGather: every rank's `send` (bytes_per_rank bytes) lands in block r of
  // every rank's `recv` (size()*bytes_per_rank bytes).
  virtual WorkPtr AllGather(const void* send, void* recv, size_t bytes_per_rank,
                            const OpOptions& options = {}) = 0;

  // Point-to-point sends and receives issued together (one NCCL group; on
  // Gloo all posted before any is waited), so matching pairs cannot deadlock.
  virtual WorkPtr SendRecv(const std::vector<PeerTransfer>& sends,
                           const std::vector<PeerTransfer>& recvs,
                           const OpOptions& options = {}) = 0;

  // Local copy in this communicator's memory kind. `height` rows of
  // `width_bytes` each, rows `src_pitch_bytes` / `dst_pitch_bytes` apart
  // (cudaMemcpy2D semantics); height 1 is a plain memcpy. This is the reorder
  // copy of the pipelined schedules.
  virtual WorkPtr Copy(void* dst, size_t dst_pitch_bytes, const void* src,
                       size_t src_pitch_bytes, size_t width_bytes,
                       size_t height, const OpOptions& options = {}) = 0;

  // Memory of memory_kind(), and synchronous transfers between it and the host
  // (for filling inputs and checking outputs outside the timed region).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;
  virtual absl::Status CopyFromHost(void* dst, const void* host_src,
                                    size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* src,
                                  size_t bytes) = 0;

  // Collective over this communicator (MPI_Comm_split semantics): every member
  // calls it; members with the same `color` form a new communicator, ranked by
  // (`key`, old rank). The new communicator has the same number of streams.
  // Fails (naming the missing ranks) if a member does not join by `deadline`.
  // Not thread-safe: members call Split in the same order, from one thread.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(
      int color, int key, absl::Time deadline) = 0;

  // Fails every pending and future operation with kAborted; does not wait for
  // peers. Safe to call from any thread, more than once.
  virtual void Abort() = 0;
};

}  // namespace monta::comm

#endif  // MONTA_AGENT_COMM_COMMUNICATOR_H_
