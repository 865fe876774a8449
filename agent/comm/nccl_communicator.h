// Communicator over NCCL (2.28+): device memory of one GPU per rank, one
// ncclComm per group, one CUDA stream per Communicator stream.
//
// Every NCCL call is made non-blocking (ncclConfig_t::blocking = 0) so that a
// peer that never arrives, or a network that stalls, ends in a bounded error
// and ncclCommAbort instead of a hang. The unique id travels through the same
// RendezvousStore as Gloo's addresses.
#ifndef MONTA_AGENT_COMM_NCCL_COMMUNICATOR_H_
#define MONTA_AGENT_COMM_NCCL_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/comm/communicator.h"
#include "agent/comm/rendezvous_store.h"

namespace monta::comm {

struct NcclOptions {
  // CUDA device ordinal this rank uses.
  int device = 0;
  int num_streams = 2;
  // Bound on every operation, from its Wait() call's issue time.
  absl::Duration op_timeout = absl::Seconds(60);
};

// Number of visible GPUs, or FailedPrecondition("no GPU: ...") when there are
// none or the driver is missing (cudaGetDeviceCount fails).
absl::StatusOr<int> CudaDeviceCount();

class NcclCommunicator : public Communicator {
 public:
  // Collective over `size` ranks sharing `store` and `scope`. Rank 0 publishes
  // the unique id; the others wait for it until `deadline`. Init polls
  // ncclCommGetAsyncError until `deadline`, then aborts.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
      int size, const NcclOptions& options, absl::Time deadline);

  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_streams() const override;
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }

  WorkPtr AllToAll(const void* send, void* recv, size_t bytes_per_peer,
                   const OpOptions& options) override;
  WorkPtr AllGather(const void* send, void* recv, size_t bytes_per_rank,
                    const OpOptions& options) override;
  WorkPtr SendRecv(const std::vector<PeerTransfer>& sends,
                   const std::vector<PeerTransfer>& recvs,
                   const OpOptions& options) override;
  WorkPtr Copy(void* dst, size_t dst_pitch_bytes, const void* src,
               size_t src_pitch_bytes, size_t width_bytes, size_t height,
               const OpOptions& options) override;

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override;
  absl::Status CopyFromHost(void* dst, const void* host_src,
                            size_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* src,
                          size_t bytes) override;

  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      int color, int key, absl::Time deadline) override;

  void Abort() override;

  // Shared with in-flight Work handles (which may outlive this object).
  struct State;

 private:
  NcclCommunicator(std::shared_ptr<RendezvousStore> store, std::string scope,
                   int rank, int size, const NcclOptions& options);
  absl::Status Init(absl::Time deadline);
  // Makes `stream` wait for `after` (events for NCCL handles, a host wait for
  // foreign ones), then runs `enqueue` and records the handle's event.
  WorkPtr Launch(int stream, const std::vector<WorkPtr>& after,
                 const char* name,
                 const std::function<absl::Status()>& enqueue);

  const std::shared_ptr<RendezvousStore> store_;
  const std::string scope_;
  const int rank_;
  const int size_;
  const NcclOptions options_;
  std::shared_ptr<State> state_;
  int splits_ = 0;  // see GlooCommunicator::splits_
};

}  // namespace monta::comm

#endif  // MONTA_AGENT_COMM_NCCL_COMMUNICATOR_H_
