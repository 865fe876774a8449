// One entry point for the agent runtime: a communicator of either backend,
// without #ifdefs at the call site (NCCL is linked only where CUDA was found
// at build time; elsewhere asking for it is a clean "no GPU" error).
#ifndef MONTA_AGENT_COMM_COMMUNICATOR_FACTORY_H_
#define MONTA_AGENT_COMM_COMMUNICATOR_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/comm/communicator.h"
#include "agent/comm/rendezvous_store.h"

namespace monta::comm {

enum class Backend {
  kGloo,
  kNccl,
};

absl::StatusOr<Backend> ParseBackend(absl::string_view name);  // gloo|nccl

struct CommunicatorOptions {
  int num_streams = 2;
  absl::Duration op_timeout = absl::Seconds(60);
  // Gloo: address this rank listens on and advertises.
  std::string hostname = "127.0.0.1";
  // NCCL: CUDA device of this rank; -1 = rank modulo the visible GPUs.
  int device = -1;
};

// Whether this build can run NCCL at all.
bool NcclBuilt();

// Visible GPUs, or FailedPrecondition("no GPU: ...").
absl::StatusOr<int> GpuCount();

// Collective over the `size` ranks sharing `store` and `scope`; see
// GlooCommunicator::Create and NcclCommunicator::Create.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    Backend backend, std::shared_ptr<RendezvousStore> store, std::string scope,
    int rank, int size, const CommunicatorOptions& options,
    absl::Time deadline);

}  // namespace monta::comm

#endif  // MONTA_AGENT_COMM_COMMUNICATOR_FACTORY_H_
