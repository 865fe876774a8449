#include "agent/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace monta::comm {
namespace {

// Slot namespace for SendRecv, away from the prefixes Gloo's collectives use.
// Gloo matches messages per (peer, slot) in posting order, so one slot serves
// every SendRecv of a stream.
constexpr uint8_t kSendRecvSlotPrefix = 0xA5;
// Slot namespace of AllToAll (one slot per operation, from its tag).
constexpr uint8_t kAllToAllSlotPrefix = 0xA6;

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

absl::Status FromGlooException(const std::exception& e, absl::string_view op) {
  const std::string what = e.what();
  // Gloo reports timeouts only through the message text.
  if (absl::StrContains(what, "imed out") ||
      absl::StrContains(what, "imeout")) {
    return absl::DeadlineExceededError(absl::StrCat(op, ": ", what));
  }
  return absl::UnavailableError(absl::StrCat(op, ": ", what));
}

// Gloo's store interface over ours, for connectFullMesh. Gloo expects
// exceptions, so errors become gloo::IoException.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStore& store, std::string scope,
                   absl::Time deadline)
      : store_(store), scope_(std::move(scope)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s =
        store_.Set(Key(key), absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = store_.Get(Key(key), deadline_);
    if (!v.ok()) throw gloo::IoException(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, ToChrono(deadline_ - absl::Now()));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline =
        std::min(deadline_, absl::Now() + absl::Milliseconds(timeout.count()));
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v = store_.Get(Key(key), deadline);
      if (!v.ok()) throw gloo::IoException(v.status().ToString());
    }
  }

 private:
  std::string Key(const std::string& key) const {
    return absl::StrCat(scope_, "/", key);
  }
  RendezvousStore& store_;
  const std::string scope_;
  const absl::Time deadline_;
};

// Flat AllToAll with every receive posted before any send. gloo::alltoall
// posts the send to rank+i before the receive from rank-i. On Gloo's TCP
// pairs a posted receive is announced to the peer by a small message on the
// pair's one connection, and that message queues behind data this rank is
// already writing there: the peer's data toward us then waits for ours
// toward it, so the two directions of a pair run one after the other or at
// once depending on timing (a bimodal time, and half a duplex link).
// Announcing all receives first, while no data of this operation is in
// flight, lets both directions of every pair stream together.
absl::Status RecvFirstAllToAll(gloo::Context& context, const void* send,
                               void* recv, size_t bytes_per_peer, uint32_t tag,
                               std::chrono::milliseconds timeout) {
  const int n = context.size;
  const int me = context.rank;
  const size_t total = bytes_per_peer * static_cast<size_t>(n);
  const uint64_t slot = gloo::Slot::build(kAllToAllSlotPrefix, tag);
  // Gloo takes non-const pointers but only reads a send buffer.
  std::unique_ptr<gloo::transport::UnboundBuffer> in =
      context.createUnboundBuffer(const_cast<void*>(send), total);
  std::unique_ptr<gloo::transport::UnboundBuffer> out =
      context.createUnboundBuffer(recv, total);
  for (int i = 1; i < n; ++i) {
    const int from = (me + n - i) % n;
    out->recv(from, slot, from * bytes_per_peer, bytes_per_peer);
  }
  for (int i = 1; i < n; ++i) {
    const int to = (me + i) % n;
    in->send(to, slot, to * bytes_per_peer, bytes_per_peer);
  }
  std::memcpy(static_cast<char*>(recv) + me * bytes_per_peer,
              static_cast<const char*>(send) + me * bytes_per_peer,
              bytes_per_peer);
  for (int i = 1; i < n; ++i) {
    if (!out->waitRecv(timeout)) {
      return absl::AbortedError("AllToAll: receive aborted");
    }
  }
  for (int i = 1; i < n; ++i) {
    if (!in->waitSend(timeout)) {
      return absl::AbortedError("AllToAll: send aborted");
    }
  }
  return absl::OkStatus();
}

class StreamCore;

// Completion of one operation. Its waiter may run the operation itself (see
// StreamCore::TryRunInline).
class HostWork : public Work {
 public:
  HostWork() = default;
  explicit HostWork(std::weak_ptr<StreamCore> core) : core_(std::move(core)) {}

  absl::Status Wait() override;

  void Complete(absl::Status status) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
    done_ = true;
  }

 private:
  // Stream that runs this operation; empty for handles born failed.
  const std::weak_ptr<StreamCore> core_{};
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

WorkPtr Failed(absl::Status status) {
  auto work = std::make_shared<HostWork>();
  work->Complete(std::move(status));
  return work;
}

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t bytes)
      : data_(new char[std::max<size_t>(1, bytes)]), size_(bytes) {}
  void* data() override { return data_.get(); }
  size_t size_bytes() const override { return size_; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_;
};

void CopyRows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
              size_t width, size_t height) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (height == 1 || (dst_pitch == width && src_pitch == width)) {
    std::memcpy(d, s, width * height);
    return;
  }
  for (size_t row = 0; row < height; ++row) {
    std::memcpy(d + row * dst_pitch, s + row * src_pitch, width);
  }
}

using Op = std::function<absl::Status(
    const std::shared_ptr<gloo::Context>& context, uint32_t tag)>;

// The operations of one stream, in issue order, and the Gloo context (absent
// for a single-rank group) they run on. Shared by the stream's worker thread
// and its handles: a thread that waits on the operation at the head of an
// idle stream runs it itself, which saves the two thread hand-offs (issue ->
// worker -> waiter) that otherwise dominate small operations on busy hosts.
// Either way exactly one thread runs the stream's operations at a time.
class StreamCore : public std::enable_shared_from_this<StreamCore> {
 public:
  StreamCore(std::shared_ptr<gloo::Context> context, absl::Duration op_timeout)
      : context_(std::move(context)), op_timeout_(op_timeout) {}

  WorkPtr Enqueue(std::string name, std::vector<WorkPtr> after, Op op) {
    auto work = std::make_shared<HostWork>(weak_from_this());
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) {
      work->Complete(error_);
      return work;
    }
    queue_.push_back(Task{std::move(name), std::move(after), std::move(op),
                          next_tag_++, work});
    return work;
  }

  // Runs the head operation now, on this thread, if it is `work`'s and no
  // other operation of the stream is running.
  void TryRunInline(const HostWork* work) {
    Task task;
    absl::Status poisoned;
    {
      absl::MutexLock lock(&mu_);
      if (running_ || queue_.empty() || queue_.front().work.get() != work) {
        return;
      }
      poisoned = PopLocked(task);
    }
    Execute(task, poisoned);
  }

  // The worker thread's loop; returns once stopping and drained.
  void Loop() {
    while (true) {
      Task task;
      absl::Status poisoned;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return (!running_ && !queue_.empty()) ||
                 (stopping_ && queue_.empty());
        };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        if (stopping_ && error_.ok()) {
          error_ = absl::CancelledError("communicator destroyed");
        }
        poisoned = PopLocked(task);
      }
      Execute(task, poisoned);
    }
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }

  void Abort() {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = absl::AbortedError("communicator aborted");
  }

  std::chrono::milliseconds timeout() const { return ToChrono(op_timeout_); }

 private:
  struct Task {
    std::string name;
    std::vector<WorkPtr> after;
    Op op;
    uint32_t tag = 0;
    std::shared_ptr<HostWork> work;
  };

  // Takes the head task and marks the stream busy; returns the stream's
  // error so far (the task fails with it instead of running).
  absl::Status PopLocked(Task& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    return error_;
  }

  void Execute(Task& task, absl::Status status) {
    for (const WorkPtr& dep : task.after) {
      if (!status.ok()) break;
      absl::Status dep_status = dep->Wait();
      if (!dep_status.ok()) {
        status = absl::Status(dep_status.code(),
                              absl::StrCat(task.name, ": a dependency failed: ",
                                           dep_status.message()));
      }
    }
    if (status.ok()) {
      try {
        status = task.op(context_, task.tag);
      } catch (const std::exception& e) {
        status = FromGlooException(e, task.name);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      // Peers now disagree with us about this stream's sequence of
      // collectives; everything after would mismatch, so fail fast.
      if (!status.ok() && error_.ok()) error_ = status;
      running_ = false;
    }
    task.work->Complete(std::move(status));
  }

  const std::shared_ptr<gloo::Context> context_;
  const absl::Duration op_timeout_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  uint32_t next_tag_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // an operation is executing
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // First failure; every later operation fails with it.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

absl::Status HostWork::Wait() {
  if (std::shared_ptr<StreamCore> core = core_.lock()) {
    core->TryRunInline(this);
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

}  // namespace

// One stream: its operations and the worker thread that runs those nobody
// waits for yet.
class GlooCommunicator::Stream {
 public:
  Stream(std::shared_ptr<gloo::Context> context, absl::Duration op_timeout)
      : core_(std::make_shared<StreamCore>(std::move(context), op_timeout)) {
    worker_ = std::thread([core = core_] { core->Loop(); });
  }

  ~Stream() {
    core_->Stop();
    worker_.join();
  }

  WorkPtr Enqueue(std::string name, std::vector<WorkPtr> after, Op op) {
    return core_->Enqueue(std::move(name), std::move(after), std::move(op));
  }
  void Abort() { core_->Abort(); }
  std::chrono::milliseconds timeout() const { return core_->timeout(); }

 private:
  const std::shared_ptr<StreamCore> core_;
  std::thread worker_;
};

GlooCommunicator::GlooCommunicator(
    std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
    int size, const GlooOptions& options,
    std::shared_ptr<gloo::transport::Device> device)
    : store_(std::move(store)),
      scope_(std::move(scope)),
      rank_(rank),
      size_(size),
      options_(options),
      device_(std::move(device)) {}

GlooCommunicator::~GlooCommunicator() {
  // Streams first: their workers use the contexts and the device.
  streams_.clear();
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    std::shared_ptr<RendezvousStore> store, std::string scope, int rank,
    int size, const GlooOptions& options, absl::Time deadline) {
  absl::Status args = CheckGroupArgs(rank, size, options.num_streams);
  if (!args.ok()) return args;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot create Gloo TCP device on '", options.hostname,
                     "': ", e.what()));
  }
  std::unique_ptr<GlooCommunicator> comm(
      new GlooCommunicator(std::move(store), std::move(scope), rank, size,
                           options, std::move(device)));
  absl::Status connected = comm->Connect(deadline);
  if (!connected.ok()) return connected;
  return comm;
}

absl::Status GlooCommunicator::Connect(absl::Time deadline) {
  // Our own join first: Gloo's connect would only say that some key timed
  // out; this names the ranks that never came.
  absl::Status joined = JoinAll(*store_, scope_, rank_, size_, deadline);
  if (!joined.ok()) return joined;
  for (int s = 0; s < options_.num_streams; ++s) {
    std::shared_ptr<gloo::Context> context;
    if (size_ > 1) {
      auto rendezvous =
          std::make_shared<gloo::rendezvous::Context>(rank_, size_);
      // Bounds the TCP connects (the store waits are bounded by the adapter).
      // Gloo's tcp::Pair waits timeout * 5 for the initial connect, so a fifth
      // of what is left keeps a peer that died mid-connect inside `deadline`.
      rendezvous->setTimeout(ToChrono(
          std::max(absl::Milliseconds(200), (deadline - absl::Now()) / 5)));
      GlooStoreAdapter adapter(*store_, absl::StrCat(scope_, "/stream", s),
                               deadline);
      try {
        std::shared_ptr<gloo::transport::Device> device = device_;
        rendezvous->connectFullMesh(adapter, device);
      } catch (const std::exception& e) {
        return FromGlooException(
            e, absl::StrCat("Gloo connect of rank ", rank_, " in '", scope_,
                            "' stream ", s));
      }
      rendezvous->setTimeout(ToChrono(options_.op_timeout));
      context = std::move(rendezvous);
    }
    streams_.push_back(std::make_unique<Stream>(context, options_.op_timeout));
  }
  return absl::OkStatus();
}

int GlooCommunicator::num_streams() const {
  return static_cast<int>(streams_.size());
}

GlooCommunicator::Stream* GlooCommunicator::StreamOrNull(int index) {
  if (index < 0 || index >= num_streams()) return nullptr;
  return streams_[index].get();
}

namespace {
absl::Status BadStream(int stream, int num_streams) {
  return absl::InvalidArgumentError(
      absl::StrCat("stream ", stream, " is not in [0, ", num_streams, ")"));
}

using UnboundBuffers =
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>;

// Posts the transfers to other ranks of one side of a SendRecv (sends when
// `send`, else receives) into `posted` and returns those to `rank` itself,
// which are local copies. Empty transfers post nothing.
std::vector<const PeerTransfer*> PostToPeers(
    gloo::Context& context, const std::vector<PeerTransfer>& transfers,
    int rank, uint64_t slot, bool send, UnboundBuffers& posted) {
  std::vector<const PeerTransfer*> self;
  for (const PeerTransfer& t : transfers) {
    if (t.peer == rank) {
      self.push_back(&t);
      continue;
    }
    if (t.bytes == 0) continue;
    posted.push_back(context.createUnboundBuffer(t.buffer, t.bytes));
    if (send) {
      posted.back()->send(t.peer, slot);
    } else {
      posted.back()->recv(t.peer, slot);
    }
  }
  return self;
}
}  // namespace

WorkPtr GlooCommunicator::AllToAll(const void* send, void* recv,
                                   size_t bytes_per_peer,
                                   const OpOptions& options) {
  Stream* stream = StreamOrNull(options.stream);
  if (stream == nullptr) {
    return Failed(BadStream(options.stream, num_streams()));
  }
  const std::chrono::milliseconds timeout = stream->timeout();
  return stream->Enqueue("AllToAll", options.after,
                         [=](const std::shared_ptr<gloo::Context>& context,
                             uint32_t tag) -> absl::Status {
                           if (bytes_per_peer == 0) return absl::OkStatus();
                           if (context == nullptr) {  // single-rank group
                             std::memcpy(recv, send, bytes_per_peer);
                             return absl::OkStatus();
                           }
                           return RecvFirstAllToAll(*context, send, recv,
                                                    bytes_per_peer, tag,
                                                    timeout);
                         });
}

WorkPtr GlooCommunicator::AllGather(const void* send, void* recv,
                                    size_t bytes_per_rank,
                                    const OpOptions& options) {
  Stream* stream = StreamOrNull(options.stream);
  if (stream == nullptr) {
    return Failed(BadStream(options.stream, num_streams()));
  }
  const size_t total = bytes_per_rank * static_cast<size_t>(size_);
  const std::chrono::milliseconds timeout = stream->timeout();
  return stream->Enqueue("AllGather", options.after,
                         [=](const std::shared_ptr<gloo::Context>& context,
                             uint32_t tag) -> absl::Status {
                           if (bytes_per_rank == 0) return absl::OkStatus();
                           if (context == nullptr) {
                             std::memcpy(recv, send, bytes_per_rank);
                             return absl::OkStatus();
                           }
                           gloo::AllgatherOptions opts(context);
                           opts.setInput(
                               static_cast<uint8_t*>(const_cast<void*>(send)),
                               bytes_per_rank);
                           opts.setOutput(static_cast<uint8_t*>(recv), total);
                           opts.setTag(tag);
                           opts.setTimeout(timeout);
                           gloo::allgather(opts);
                           return absl::OkStatus();
                         });
}

WorkPtr GlooCommunicator::SendRecv(const std::vector<PeerTransfer>& sends,
                                   const std::vector<PeerTransfer>& recvs,
                                   const OpOptions& options) {
  Stream* stream = StreamOrNull(options.stream);
  if (stream == nullptr) {
    return Failed(BadStream(options.stream, num_streams()));
  }
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerTransfer& t : *list) {
      if (t.peer < 0 || t.peer >= size_) {
        return Failed(absl::InvalidArgumentError(absl::StrCat(
            "SendRecv peer ", t.peer, " is not in [0, ", size_, ")")));
      }
    }
  }
  const int rank = rank_;
  const std::chrono::milliseconds timeout = stream->timeout();
  return stream->Enqueue(
      "SendRecv", options.after,
      [=](const std::shared_ptr<gloo::Context>& context,
          uint32_t /*tag*/) -> absl::Status {
        const uint64_t slot = gloo::Slot::build(kSendRecvSlotPrefix, 0);
        UnboundBuffers out, in;
        // Self transfers are local copies, matched in order.
        const std::vector<const PeerTransfer*> self_sends =
            PostToPeers(*context, sends, rank, slot, /*send=*/true, out);
        const std::vector<const PeerTransfer*> self_recvs =
            PostToPeers(*context, recvs, rank, slot, /*send=*/false, in);
        if (self_sends.size() != self_recvs.size()) {
          return absl::InvalidArgumentError(
              "SendRecv: self sends and self receives do not pair up");
        }
        for (size_t i = 0; i < self_sends.size(); ++i) {
          if (self_sends[i]->bytes != self_recvs[i]->bytes) {
            return absl::InvalidArgumentError(
                "SendRecv: self send and receive sizes differ");
          }
          std::memcpy(self_recvs[i]->buffer, self_sends[i]->buffer,
                      self_sends[i]->bytes);
        }
        for (auto& b : out) {
          if (!b->waitSend(timeout)) return absl::AbortedError("send aborted");
        }
        for (auto& b : in) {
          if (!b->waitRecv(timeout)) return absl::AbortedError("recv aborted");
        }
        return absl::OkStatus();
      });
}

WorkPtr GlooCommunicator::Copy(void* dst, size_t dst_pitch_bytes,
                               const void* src, size_t src_pitch_bytes,
                               size_t width_bytes, size_t height,
                               const OpOptions& options) {
  Stream* stream = StreamOrNull(options.stream);
  if (stream == nullptr) {
    return Failed(BadStream(options.stream, num_streams()));
  }
  if (height > 1 &&
      (dst_pitch_bytes < width_bytes || src_pitch_bytes < width_bytes)) {
    return Failed(absl::InvalidArgumentError("Copy: pitch below width"));
  }
  return stream->Enqueue(
      "Copy", options.after,
      [=](const std::shared_ptr<gloo::Context>&, uint32_t) -> absl::Status {
        CopyRows(dst, dst_pitch_bytes, src, src_pitch_bytes, width_bytes,
                 height);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::unique_ptr<Buffer>> GlooCommunicator::Allocate(
    size_t bytes) {
  return std::unique_ptr<Buffer>(new HostBuffer(bytes));
}

absl::Status GlooCommunicator::CopyFromHost(void* dst, const void* host_src,
                                            size_t bytes) {
  std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::CopyToHost(void* host_dst, const void* src,
                                          size_t bytes) {
  std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Split(
    int color, int key, absl::Time deadline) {
  const std::string split_scope = absl::StrCat(scope_, "/split", splits_++);
  absl::StatusOr<SplitPlacement> placement = ExchangeSplitColors(
      *store_, split_scope, rank_, size_, color, key, deadline);
  if (!placement.ok()) return placement.status();
  std::unique_ptr<GlooCommunicator> child(new GlooCommunicator(
      store_, absl::StrCat(split_scope, "/color", color), placement->rank,
      placement->size, options_, device_));
  absl::Status connected = child->Connect(deadline);
  if (!connected.ok()) return connected;
  return std::unique_ptr<Communicator>(std::move(child));
}

void GlooCommunicator::Abort() {
  for (auto& stream : streams_) stream->Abort();
}

}  // namespace monta::comm
