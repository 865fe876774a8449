#include "agent/comm/communicator_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/comm/gloo_communicator.h"
#ifdef MONTA_HAS_NCCL
#include "agent/comm/nccl_communicator.h"
#endif

namespace monta::comm {

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (want gloo or nccl)"));
}

bool NcclBuilt() {
#ifdef MONTA_HAS_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<int> GpuCount() {
#ifdef MONTA_HAS_NCCL
  return CudaDeviceCount();
#else
  return absl::FailedPreconditionError(
      "no GPU: this build has no CUDA/NCCL (none found at configure time)");
#endif
}

namespace {

// A backend's Create result as the interface, with the options both backends
// share filled in first.
template <typename Impl, typename ImplOptions>
absl::StatusOr<std::unique_ptr<Communicator>> CreateBackend(
    ImplOptions impl_options, const CommunicatorOptions& options,
    std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
    int size, absl::Time deadline) {
  impl_options.num_streams = options.num_streams;
  impl_options.op_timeout = options.op_timeout;
  auto c = Impl::Create(std::move(store), std::move(scope), rank, size,
                        impl_options, deadline);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Communicator>(std::move(*c));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    Backend backend, std::shared_ptr<RendezvousStore> store, std::string scope,
    int rank, int size, const CommunicatorOptions& options,
    absl::Time deadline) {
  if (backend == Backend::kGloo) {
    GlooOptions gloo;
    gloo.hostname = options.hostname;
    return CreateBackend<GlooCommunicator>(gloo, options, std::move(store),
                                           std::move(scope), rank, size,
                                           deadline);
  }
#ifdef MONTA_HAS_NCCL
  absl::StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) return gpus.status();
  NcclOptions nccl;
  nccl.device = options.device >= 0 ? options.device : rank % *gpus;
  return CreateBackend<NcclCommunicator>(
      nccl, options, std::move(store), std::move(scope), rank, size, deadline);
#else
  return GpuCount().status();
#endif
}

}  // namespace monta::comm
