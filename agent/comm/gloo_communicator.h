// Communicator over Gloo's TCP transport: host memory, CPUs only, runs
// anywhere (every schedule is testable without a GPU).
//
// Gloo collectives block their caller, so each stream is a worker thread with
// its own gloo::rendezvous::Context (its own TCP pairs): operations on
// different streams really overlap on the wire, and no two threads ever share
// one Gloo context.
//
// Creating one from a custom store (e.g. the agent runtime's adapter over the
// planner's RendezvousSet/Get RPCs):
//
//   std::shared_ptr<RendezvousStore> store = ...;  // Set + Get-with-deadline
//   GlooOptions options;
//   options.hostname = "10.0.0.7";  // address peers reach this rank at
//   absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
//       GlooCommunicator::Create(store, "task42/world", rank, size, options,
//                                absl::Now() + absl::Seconds(30));
#ifndef MONTA_AGENT_COMM_GLOO_COMMUNICATOR_H_
#define MONTA_AGENT_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/comm/communicator.h"
#include "agent/comm/rendezvous_store.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace monta::comm {

struct GlooOptions {
  // Address this rank listens on and advertises to its peers.
  std::string hostname = "127.0.0.1";
  // Concurrent streams (one Gloo context and worker thread each).
  int num_streams = 2;
  // Bound on every operation, from the moment it starts running.
  absl::Duration op_timeout = absl::Seconds(60);
};

class GlooCommunicator : public Communicator {
 public:
  // Collective over `size` ranks that share `store` and `scope`: waits until
  // all ranks joined (the error names the missing ones at `deadline`), then
  // connects a full TCP mesh per stream. `scope` must be unique per group and
  // run (stale keys of an earlier run would be read as peers).
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
      int size, const GlooOptions& options, absl::Time deadline);

  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_streams() const override;
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }

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

  // Queued operations fail at once; one already inside Gloo ends at its
  // timeout (Gloo cannot interrupt a running collective from outside).
  void Abort() override;

 private:
  class Stream;
  GlooCommunicator(std::shared_ptr<RendezvousStore> store, std::string scope,
                   int rank, int size, const GlooOptions& options,
                   std::shared_ptr<gloo::transport::Device> device);
  absl::Status Connect(absl::Time deadline);
  Stream* StreamOrNull(int index);

  const std::shared_ptr<RendezvousStore> store_;
  const std::string scope_;
  const int rank_;
  const int size_;
  const GlooOptions options_;
  // Shared by all communicators split from the same root (one TCP listener
  // and event loop per rank).
  const std::shared_ptr<gloo::transport::Device> device_;
  std::vector<std::unique_ptr<Stream>> streams_;
  // Split() calls so far: names each split's store scope identically on all
  // members, because members call Split in the same order.
  int splits_ = 0;
};

}  // namespace monta::comm

#endif  // MONTA_AGENT_COMM_GLOO_COMMUNICATOR_H_
