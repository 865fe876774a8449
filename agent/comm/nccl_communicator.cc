#include "agent/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace monta::comm {

struct NcclCommunicator::State {
  int device = 0;
  // Set once by Init before the state is shared; after AbortComm the handle
  // is freed, so every later use goes through QueryAsync (under mu).
  ncclComm_t comm = nullptr;
  std::vector<cudaStream_t> streams;
  absl::Mutex mu;
  // First failure (including abort); every later operation fails with it.
  absl::Status error ABSL_GUARDED_BY(mu);
  bool aborted ABSL_GUARDED_BY(mu) = false;

  absl::Status Error() {
    absl::MutexLock lock(&mu);
    return error;
  }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = std::move(status);
  }
  // ncclCommGetAsyncError, unless the communicator was aborted (then the
  // recorded error). ncclInProgress and ncclSuccess come back as OK.
  absl::Status QueryAsync(ncclResult_t* result) {
    absl::MutexLock lock(&mu);
    if (aborted) return error;
    *result = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, result);
    if (q != ncclSuccess) *result = q;
    return absl::OkStatus();
  }
  // ncclCommAbort once; safe from any thread.
  void AbortComm(absl::Status why) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = std::move(why);
    if (aborted || comm == nullptr) return;
    aborted = true;
    ncclCommAbort(comm);
  }
};

namespace {

// How often a waiting host thread polls NCCL and CUDA: short against the
// tens of microseconds an AllToAll takes, long enough not to hog a core.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);

absl::Status CudaError(cudaError_t err, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err),
                                          " (", cudaGetErrorString(err), ")"));
}

absl::Status NcclError(ncclResult_t r, ncclComm_t comm,
                       absl::string_view what) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : "";
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(r),
                                             (last && *last) ? ": " : "",
                                             last ? last : ""));
}

// Completes a non-blocking NCCL call: polls the communicator while it reports
// ncclInProgress, aborting it at `deadline`.
absl::Status Settle(NcclCommunicator::State& state, ncclResult_t r,
                    absl::Time deadline, absl::string_view what) {
  while (r == ncclInProgress) {
    if (absl::Now() >= deadline) {
      absl::Status timeout = absl::DeadlineExceededError(
          absl::StrCat(what, " still in progress at the deadline; aborted"));
      state.AbortComm(timeout);
      return timeout;
    }
    absl::SleepFor(kPollInterval);
    absl::Status aborted = state.QueryAsync(&r);
    if (!aborted.ok()) return aborted;
  }
  if (r != ncclSuccess) {
    absl::Status err = NcclError(r, state.comm, what);
    state.Fail(err);
    return err;
  }
  return absl::OkStatus();
}

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::State> state, cudaEvent_t event,
           absl::Time deadline, std::string name)
      : state_(std::move(state)),
        event_(event),
        deadline_(deadline),
        name_(std::move(name)) {}
  ~NcclWork() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }

  cudaEvent_t event() const { return event_; }

  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      status_ = Poll();
      done_ = true;
    }
    return status_;
  }

 private:
  absl::Status Poll() {
    cudaSetDevice(state_->device);
    while (true) {
      cudaError_t q = cudaEventQuery(event_);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) {
        absl::Status err = CudaError(q, name_);
        state_->Fail(err);
        return err;
      }
      absl::Status failed = state_->Error();
      if (!failed.ok()) return failed;
      ncclResult_t async = ncclSuccess;
      failed = state_->QueryAsync(&async);
      if (!failed.ok()) return failed;
      if (async != ncclSuccess && async != ncclInProgress) {
        absl::Status err = NcclError(async, state_->comm, name_);
        state_->AbortComm(err);
        return err;
      }
      if (absl::Now() >= deadline_) {
        absl::Status timeout = absl::DeadlineExceededError(
            absl::StrCat(name_, " did not finish by its deadline; aborted"));
        state_->AbortComm(timeout);
        return timeout;
      }
      absl::SleepFor(kPollInterval);
    }
  }

  const std::shared_ptr<NcclCommunicator::State> state_;
  const cudaEvent_t event_;
  const absl::Time deadline_;
  const std::string name_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class FailedWork : public Work {
 public:
  explicit FailedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  const absl::Status status_;
};

class DeviceBuffer : public Buffer {
 public:
  DeviceBuffer(void* ptr, size_t bytes, int device)
      : ptr_(ptr), size_(bytes), device_(device) {}
  ~DeviceBuffer() override {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }
  void* data() override { return ptr_; }
  size_t size_bytes() const override { return size_; }

 private:
  void* const ptr_;
  const size_t size_;
  const int device_;
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  // cudaGetDeviceCount leaves the count unwritten when it fails (e.g. error
  // 35, no driver), so it must start at 0.
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no GPU: cudaGetDeviceCount returned ", static_cast<int>(err), " (",
        cudaGetErrorName(err), ": ", cudaGetErrorString(err), ")"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no GPU: cudaGetDeviceCount is 0");
  }
  return count;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<RendezvousStore> store,
                                   std::string scope, int rank, int size,
                                   const NcclOptions& options)
    : store_(std::move(store)),
      scope_(std::move(scope)),
      rank_(rank),
      size_(size),
      options_(options),
      state_(std::make_shared<State>()) {
  state_->device = options.device;
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(state_->device);
  bool aborted = false;
  {
    absl::MutexLock lock(&state_->mu);
    aborted = state_->aborted;
  }
  if (state_->comm != nullptr && !aborted) {
    // Finalize flushes outstanding work; bounded so a dead peer cannot hang
    // the destructor.
    absl::Status finalized =
        Settle(*state_, ncclCommFinalize(state_->comm),
               absl::Now() + absl::Seconds(10), "ncclCommFinalize");
    if (finalized.ok()) {
      ncclCommDestroy(state_->comm);
    }  // else Settle aborted it.
  }
  for (cudaStream_t s : state_->streams) cudaStreamDestroy(s);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
    int size, const NcclOptions& options, absl::Time deadline) {
  absl::Status args = CheckGroupArgs(rank, size, options.num_streams);
  if (!args.ok()) return args;
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) return devices.status();
  if (options.device < 0 || options.device >= *devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", options.device, " is not in [0, ", *devices, ")"));
  }
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(
      std::move(store), std::move(scope), rank, size, options));
  absl::Status init = comm->Init(deadline);
  if (!init.ok()) return init;
  return comm;
}

absl::Status NcclCommunicator::Init(absl::Time deadline) {
  cudaError_t err = cudaSetDevice(state_->device);
  if (err != cudaSuccess) return CudaError(err, "cudaSetDevice");
  for (int s = 0; s < options_.num_streams; ++s) {
    cudaStream_t stream = nullptr;
    err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) return CudaError(err, "cudaStreamCreate");
    state_->streams.push_back(stream);
  }
  const std::string id_key = absl::StrCat(scope_, "/nccl_unique_id");
  ncclUniqueId id;
  if (rank_ == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(r, nullptr, "ncclGetUniqueId");
    absl::Status set = store_->Set(
        id_key,
        absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!set.ok()) return set;
  } else {
    absl::StatusOr<std::string> v = store_->Get(id_key, deadline);
    if (!v.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank 0 of '", scope_, "' never published the NCCL unique id (",
          v.status().message(), ")"));
    }
    if (v->size() != sizeof(id)) {
      return absl::InternalError("NCCL unique id has the wrong size");
    }
    std::memcpy(&id, v->data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r =
      ncclCommInitRankConfig(&state_->comm, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return NcclError(r, state_->comm, "ncclCommInitRankConfig");
  }
  absl::Status ready =
      Settle(*state_, r, deadline,
             absl::StrCat("NCCL init of rank ", rank_, "/", size_, " in '",
                          scope_, "' (a peer may never have joined)"));
  if (!ready.ok()) return ready;
  return absl::OkStatus();
}

int NcclCommunicator::num_streams() const {
  return static_cast<int>(state_->streams.size());
}

WorkPtr NcclCommunicator::Launch(int stream, const std::vector<WorkPtr>& after,
                                 const char* name,
                                 const std::function<absl::Status()>& enqueue) {
  if (stream < 0 || stream >= num_streams()) {
    return std::make_shared<FailedWork>(absl::InvalidArgumentError(absl::StrCat(
        "stream ", stream, " is not in [0, ", num_streams(), ")")));
  }
  absl::Status failed = state_->Error();
  if (!failed.ok()) return std::make_shared<FailedWork>(failed);
  cudaSetDevice(state_->device);
  cudaStream_t s = state_->streams[stream];
  for (const WorkPtr& dep : after) {
    if (auto* nccl = dynamic_cast<NcclWork*>(dep.get())) {
      cudaError_t err = cudaStreamWaitEvent(s, nccl->event(), 0);
      if (err != cudaSuccess) {
        return std::make_shared<FailedWork>(
            CudaError(err, "cudaStreamWaitEvent"));
      }
    } else {
      // A handle of another backend has no event to wait on; block the host.
      absl::Status dep_status = dep->Wait();
      if (!dep_status.ok()) return std::make_shared<FailedWork>(dep_status);
    }
  }
  absl::Status enqueued = enqueue();
  if (!enqueued.ok()) return std::make_shared<FailedWork>(enqueued);
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    return std::make_shared<FailedWork>(CudaError(err, "cudaEventCreate"));
  }
  err = cudaEventRecord(event, s);
  if (err != cudaSuccess) {
    cudaEventDestroy(event);
    return std::make_shared<FailedWork>(CudaError(err, "cudaEventRecord"));
  }
  return std::make_shared<NcclWork>(state_, event,
                                    absl::Now() + options_.op_timeout, name);
}

WorkPtr NcclCommunicator::AllToAll(const void* send, void* recv,
                                   size_t bytes_per_peer,
                                   const OpOptions& options) {
  return Launch(options.stream, options.after, "ncclAlltoAll", [&] {
    if (bytes_per_peer == 0) return absl::OkStatus();
    return Settle(*state_,
                  ncclAlltoAll(send, recv, bytes_per_peer, ncclUint8,
                               state_->comm, state_->streams[options.stream]),
                  absl::Now() + options_.op_timeout, "ncclAlltoAll");
  });
}

WorkPtr NcclCommunicator::AllGather(const void* send, void* recv,
                                    size_t bytes_per_rank,
                                    const OpOptions& options) {
  return Launch(options.stream, options.after, "ncclAllGather", [&] {
    if (bytes_per_rank == 0) return absl::OkStatus();
    return Settle(*state_,
                  ncclAllGather(send, recv, bytes_per_rank, ncclUint8,
                                state_->comm, state_->streams[options.stream]),
                  absl::Now() + options_.op_timeout, "ncclAllGather");
  });
}

WorkPtr NcclCommunicator::SendRecv(const std::vector<PeerTransfer>& sends,
                                   const std::vector<PeerTransfer>& recvs,
                                   const OpOptions& options) {
  return Launch(options.stream, options.after, "ncclSend/ncclRecv", [&] {
    cudaStream_t s = state_->streams[options.stream];
    const absl::Time deadline = absl::Now() + options_.op_timeout;
    absl::Status st =
        Settle(*state_, ncclGroupStart(), deadline, "ncclGroupStart");
    if (!st.ok()) return st;
    // One side of the group: `op` is ncclSend or ncclRecv.
    auto post = [&](const std::vector<PeerTransfer>& transfers, auto op,
                    const char* what) -> absl::Status {
      for (const PeerTransfer& t : transfers) {
        ncclResult_t r =
            op(t.buffer, t.bytes, ncclUint8, t.peer, state_->comm, s);
        if (r != ncclSuccess && r != ncclInProgress) {
          return NcclError(r, state_->comm, what);
        }
      }
      return absl::OkStatus();
    };
    st = post(sends, ncclSend, "ncclSend");
    if (st.ok()) st = post(recvs, ncclRecv, "ncclRecv");
    if (!st.ok()) {
      ncclGroupEnd();
      return st;
    }
    return Settle(*state_, ncclGroupEnd(), deadline, "ncclGroupEnd");
  });
}

WorkPtr NcclCommunicator::Copy(void* dst, size_t dst_pitch_bytes,
                               const void* src, size_t src_pitch_bytes,
                               size_t width_bytes, size_t height,
                               const OpOptions& options) {
  return Launch(options.stream, options.after, "cudaMemcpy2DAsync", [&] {
    if (width_bytes == 0 || height == 0) return absl::OkStatus();
    cudaStream_t s = state_->streams[options.stream];
    cudaError_t err =
        height == 1 ? cudaMemcpyAsync(dst, src, width_bytes,
                                      cudaMemcpyDeviceToDevice, s)
                    : cudaMemcpy2DAsync(dst, dst_pitch_bytes, src,
                                        src_pitch_bytes, width_bytes, height,
                                        cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess) return CudaError(err, "cudaMemcpy2DAsync");
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Buffer>> NcclCommunicator::Allocate(
    size_t bytes) {
  cudaSetDevice(state_->device);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    return CudaError(err, absl::StrCat("cudaMalloc(", bytes, ")"));
  }
  return std::unique_ptr<Buffer>(new DeviceBuffer(ptr, bytes, state_->device));
}

absl::Status NcclCommunicator::CopyFromHost(void* dst, const void* host_src,
                                            size_t bytes) {
  cudaSetDevice(state_->device);
  cudaError_t err = cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return CudaError(err, "cudaMemcpy to device");
  return absl::OkStatus();
}

absl::Status NcclCommunicator::CopyToHost(void* host_dst, const void* src,
                                          size_t bytes) {
  cudaSetDevice(state_->device);
  cudaError_t err = cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return CudaError(err, "cudaMemcpy to host");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Split(
    int color, int key, absl::Time deadline) {
  // Same protocol as GlooCommunicator::Split: colors through the store, then a
  // fresh ncclComm per color (its own unique id, so no ncclCommSplit state is
  // shared with the parent).
  const std::string split_scope = absl::StrCat(scope_, "/split", splits_++);
  absl::StatusOr<SplitPlacement> placement = ExchangeSplitColors(
      *store_, split_scope, rank_, size_, color, key, deadline);
  if (!placement.ok()) return placement.status();
  NcclOptions child_options = options_;
  child_options.num_streams = num_streams();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> child =
      Create(store_, absl::StrCat(split_scope, "/color", color),
             placement->rank, placement->size, child_options, deadline);
  if (!child.ok()) return child.status();
  return std::unique_ptr<Communicator>(std::move(*child));
}

void NcclCommunicator::Abort() {
  state_->AbortComm(absl::AbortedError("communicator aborted"));
}

}  // namespace monta::comm
