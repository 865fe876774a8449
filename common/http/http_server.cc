#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/http/http_parse.h"

namespace monta::http {

absl::Status HttpLimits::Validate() const {
  const std::pair<absl::Duration, const char*> timeouts[] = {
      {header_timeout, "--http_header_timeout_seconds"},
      {body_timeout, "--http_body_timeout_seconds"},
      {idle_timeout, "--http_idle_timeout_seconds"},
      {write_timeout, "--http_write_timeout_seconds"}};
  for (const auto& [value, flag] : timeouts) {
    if (value <= absl::ZeroDuration() || value > absl::Hours(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be > 0 and <= 3600, got ",
                       absl::ToDoubleSeconds(value)));
    }
  }
  if (max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_max_connections must be >= 1, got ", max_connections));
  }
  if (max_connections_per_client < 1 ||
      max_connections_per_client > max_connections) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_max_connections_per_client must be in "
                     "1..--http_max_connections (",
                     max_connections, "), got ", max_connections_per_client));
  }
  return absl::OkStatus();
}

absl::StatusOr<HttpLimits> HttpLimits::FromFlags(
    double header_timeout_seconds, double body_timeout_seconds,
    double idle_timeout_seconds, double write_timeout_seconds,
    int max_connections, int max_connections_per_client) {
  HttpLimits limits;
  limits.header_timeout = absl::Seconds(header_timeout_seconds);
  limits.body_timeout = absl::Seconds(body_timeout_seconds);
  limits.idle_timeout = absl::Seconds(idle_timeout_seconds);
  limits.write_timeout = absl::Seconds(write_timeout_seconds);
  limits.max_connections = max_connections;
  limits.max_connections_per_client = max_connections_per_client;
  if (absl::Status s = limits.Validate(); !s.ok()) return s;
  return limits;
}

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

absl::Status SplitHostPort(const std::string& address, absl::string_view what,
                           std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", address, "\": expected host:port"));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "0.0.0.0";  // ":port": every interface
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", address, "\": expected host:port with port 0..65535"));
  }
  *host = std::move(h);
  *port = p;
  return absl::OkStatus();
}

namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kListenKey = 0;
constexpr uint64_t kWakeKey = 1;
constexpr int64_t kSweepNanos = 50'000'000;  // deadline granularity
constexpr int64_t kAcceptPauseNanos = 100'000'000;
constexpr size_t kReadChunk = 16 << 10;
constexpr int64_t kNoDeadline = INT64_MAX;

enum class Phase { kHandshake, kHeader, kBody, kProcessing, kWriting };
enum class Io { kOk, kWantRead, kWantWrite, kEof, kError };
// What a step of a connection's state machine left: go on with the next
// phase, wait for the socket, or the connection is gone.
enum class Step { kContinue, kWait, kClosed };

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  SSL* ssl = nullptr;
  std::string client;
  Phase phase = Phase::kHeader;
  std::string in;  // received, not yet consumed
  RequestHead head;
  HttpRequest request;
  size_t discard_left = 0;  // an oversized body read and dropped before 413
  bool discarding = false;
  std::string out;
  size_t out_sent = 0;
  bool close_after_write = false;
  bool header_started = false;  // a byte of the current request arrived
  int requests = 0;
  int64_t deadline_ns = kNoDeadline;
  Io want = Io::kWantRead;  // what the last I/O waits for
  uint32_t events = 0;      // the epoll interest now registered
};

// The peer's IP address; IPv4-mapped IPv6 as plain IPv4, so a client has one
// name for the per-client cap.
std::string PeerAddress(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
  }
  return buf;
}

Io SslResult(SSL* ssl, int r) {
  switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kEof;
    default:
      return Io::kError;
  }
}

Io ReadSome(Conn& c, char* buf, size_t n, size_t* got) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_read(c.ssl, buf, static_cast<int>(n));
    if (r > 0) {
      *got = static_cast<size_t>(r);
      return Io::kOk;
    }
    return SslResult(c.ssl, r);
  }
  while (true) {
    const ssize_t r = ::recv(c.fd, buf, n, 0);
    if (r > 0) {
      *got = static_cast<size_t>(r);
      return Io::kOk;
    }
    if (r == 0) return Io::kEof;
    if (errno == EINTR) continue;
    return (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kWantRead
                                                     : Io::kError;
  }
}

Io WriteSome(Conn& c, const char* buf, size_t n, size_t* put) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_write(c.ssl, buf, static_cast<int>(n));
    if (r > 0) {
      *put = static_cast<size_t>(r);
      return Io::kOk;
    }
    return SslResult(c.ssl, r);
  }
  while (true) {
    const ssize_t r = ::send(c.fd, buf, n, MSG_NOSIGNAL);
    if (r >= 0) {
      *put = static_cast<size_t>(r);
      return Io::kOk;
    }
    if (errno == EINTR) continue;
    return (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kWantWrite
                                                     : Io::kError;
  }
}

// A complete request on its way to a worker, and the response on its way back.
struct Job {
  uint64_t conn_id = 0;
  const HttpHandler* handler = nullptr;
  HttpRequest request;
  bool keep_alive = true;
};
struct Done {
  uint64_t conn_id = 0;
  std::string bytes;
  bool close = false;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, std::vector<HttpRoute> routes,
       std::function<void(const HttpRequest&, int)> on_rejected)
      : options_(std::move(options)),
        routes_(std::move(routes)),
        on_rejected_(std::move(on_rejected)) {}
  ~Impl() { Shutdown(); }

  absl::Status Start();
  void Shutdown();
  int port() const { return port_; }
  HttpServerStats Stats() const {
    HttpServerStats s;
    s.accepted = accepted_.load();
    s.refused_total_cap = refused_total_.load();
    s.refused_client_cap = refused_client_.load();
    s.timed_out = timed_out_.load();
    s.requests = requests_.load();
    s.open = open_.load();
    return s;
  }

 private:
  absl::Status Bind();
  void Loop();
  void Accept();
  void AddConnection(int fd, std::string client);
  void OnEvent(uint64_t id, uint32_t events);
  void Drive(Conn& c);
  Step Handshake(Conn& c);
  Step ReadRequest(Conn& c);
  Step Parse(Conn& c);
  Step ParseBody(Conn& c);
  Step Dispatch(Conn& c);
  Step Respond(Conn& c, const HttpResponse& response, bool close);
  Step Reject(Conn& c, int status);
  Step WriteResponse(Conn& c);
  bool FlushOut(Conn& c);
  void UpdateInterest(Conn& c);
  void Close(Conn& c);
  void Sweep(int64_t now);
  bool StopStep(int64_t now);
  void OnCompletions();
  void Work();
  void Wake();
  void SetListening(bool on);

  const HttpServerOptions options_;
  const std::vector<HttpRoute> routes_;
  const std::function<void(const HttpRequest&, int)> on_rejected_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::thread loop_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  bool shut_down_ = false;

  // Event thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, int> per_client_;
  uint64_t next_id_ = 2;
  bool listening_ = false;
  int64_t accept_paused_until_ = 0;
  bool stop_started_ = false;
  int64_t stop_deadline_ = 0;

  std::atomic<int64_t> accepted_{0}, refused_total_{0}, refused_client_{0},
      timed_out_{0}, requests_{0};
  std::atomic<int> open_{0};

  // A job is queued, or the workers are to stop.
  bool WorkReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !jobs_.empty() || workers_stop_;
  }

  absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<Done> done_ ABSL_GUARDED_BY(mu_);
  bool workers_stop_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status HttpServer::Impl::Bind() {
  std::string host;
  int port = 0;
  if (absl::Status s =
          SplitHostPort(options_.address, options_.name, &host, &port);
      !s.ok()) {
    return s;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        options_.name, " ", options_.address,
        ": cannot listen: cannot resolve host: ", gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family,
                            a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR (not SO_REUSEPORT): restarts reuse the port, while a port
    // another process listens on stays refused.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(fd, options_.listen_backlog) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        options_.name, " ", options_.address, ": cannot listen: ", why));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return absl::OkStatus();
}

// Descriptors for max_connections: as Go's runtime does, the soft open-file
// limit is raised to the hard one when it is lower than the cap needs (a
// default soft limit of 1024 would otherwise make the cap unreachable, and
// the connections beyond it wait in the backlog).
static void RaiseFileLimit(int max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + 256;
  if (limit.rlim_cur >= wanted || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = std::min(limit.rlim_max, std::max(wanted, limit.rlim_cur));
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

absl::Status HttpServer::Impl::Start() {
  if (absl::Status s = options_.limits.Validate(); !s.ok()) return s;
  RaiseFileLimit(options_.limits.max_connections);
  if (absl::Status s = Bind(); !s.ok()) return s;
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat(options_.name, ": epoll: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  SetListening(true);
  for (int i = 0; i < std::max(1, options_.worker_threads); ++i)
    workers_.emplace_back([this] { Work(); });
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void HttpServer::Impl::SetListening(bool on) {
  if (on == listening_ || listen_fd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenKey;
  ::epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listen_fd_, &ev);
  listening_ = on;
}

void HttpServer::Impl::Wake() {
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;  // a full counter still wakes the loop
}

void HttpServer::Impl::Loop() {
  // OpenSSL writes through write(2): a peer that closed would raise SIGPIPE.
  // Blocked in this thread only, the signal stays pending here and the write
  // fails with EPIPE instead.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  epoll_event events[256];
  int64_t next_sweep = NowNanos() + kSweepNanos;
  while (true) {
    const int64_t wait_ns = std::max<int64_t>(0, next_sweep - NowNanos());
    const int n = ::epoll_wait(epoll_fd_, events, 256,
                               static_cast<int>(wait_ns / 1'000'000) + 1);
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kListenKey) {
        Accept();
      } else if (key == kWakeKey) {
        uint64_t count = 0;
        ssize_t ignored = ::read(wake_fd_, &count, sizeof(count));
        (void)ignored;
        OnCompletions();
      } else {
        OnEvent(key, events[i].events);
      }
    }
    const int64_t now = NowNanos();
    if (now >= next_sweep) {
      Sweep(now);
      next_sweep = now + kSweepNanos;
    }
    if (stopping_.load() && !StopStep(now)) break;
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns_) ids.push_back(id);
  for (uint64_t id : ids) Close(*conns_[id]);
}

void HttpServer::Impl::Accept() {
  for (int i = 0; i < 256; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: the pending connection would wake us again at
        // once; stop listening for a moment (the backlog holds them).
        SetListening(false);
        accept_paused_until_ = NowNanos() + kAcceptPauseNanos;
      }
      return;
    }
    std::string client = PeerAddress(ss);
    if (static_cast<int>(conns_.size()) >= options_.limits.max_connections) {
      ++refused_total_;
      ::close(fd);
      continue;
    }
    auto it = per_client_.find(client);
    if (it != per_client_.end() &&
        it->second >= options_.limits.max_connections_per_client) {
      ++refused_client_;
      ::close(fd);
      continue;
    }
    AddConnection(fd, std::move(client));
  }
}

void HttpServer::Impl::AddConnection(int fd, std::string client) {
  auto owned = std::make_unique<Conn>();
  Conn& c = *owned;
  c.id = next_id_++;
  c.fd = fd;
  c.client = std::move(client);
  c.deadline_ns =
      NowNanos() + absl::ToInt64Nanoseconds(options_.limits.header_timeout);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (options_.tls != nullptr) {
    c.ssl = SSL_new(options_.tls);
    if (c.ssl == nullptr || SSL_set_fd(c.ssl, fd) != 1) {
      ERR_clear_error();
      SSL_free(c.ssl);
      ::close(fd);
      return;
    }
    SSL_set_accept_state(c.ssl);
    // Idle connections keep no 16 KiB record buffers; partial writes let the
    // response go out as the socket takes it.
    SSL_set_mode(c.ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
    c.phase = Phase::kHandshake;
  }
  ++per_client_[c.client];
  ++accepted_;
  ++open_;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = c.id;
  c.events = EPOLLIN;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  conns_.emplace(c.id, std::move(owned));
}

void HttpServer::Impl::OnEvent(uint64_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (c.phase == Phase::kProcessing) {
    // Nothing is read while a worker has the request; a peer that is gone
    // frees its connection now (the response finds it missing).
    if ((events & (EPOLLHUP | EPOLLERR)) != 0) Close(c);
    return;
  }
  Drive(c);
}

void HttpServer::Impl::Drive(Conn& c) {
  while (true) {
    Step step = Step::kWait;
    switch (c.phase) {
      case Phase::kHandshake:
        step = Handshake(c);
        break;
      case Phase::kHeader:
      case Phase::kBody:
        step = ReadRequest(c);
        break;
      case Phase::kProcessing:
        step = Step::kWait;
        break;
      case Phase::kWriting:
        step = WriteResponse(c);
        break;
    }
    if (step == Step::kClosed) return;
    if (step == Step::kWait) break;
  }
  UpdateInterest(c);
}

Step HttpServer::Impl::Handshake(Conn& c) {
  ERR_clear_error();
  const int r = SSL_accept(c.ssl);
  if (r == 1) {
    c.phase = Phase::kHeader;
    c.want = Io::kWantRead;
    return Step::kContinue;
  }
  const Io io = SslResult(c.ssl, r);
  if (io == Io::kWantRead || io == Io::kWantWrite) {
    c.want = io;
    return Step::kWait;
  }
  ERR_clear_error();
  Close(c);
  return Step::kClosed;
}

// Sends what is buffered for the connection; false when the peer is gone
// (the connection is then closed).
bool HttpServer::Impl::FlushOut(Conn& c) {
  while (c.out_sent < c.out.size()) {
    size_t put = 0;
    const Io io = WriteSome(c, c.out.data() + c.out_sent,
                            c.out.size() - c.out_sent, &put);
    if (io == Io::kOk) {
      c.out_sent += put;
      continue;
    }
    if (io == Io::kWantRead || io == Io::kWantWrite) {
      c.want = io;
      return true;
    }
    Close(c);
    return false;
  }
  c.out.clear();
  c.out_sent = 0;
  return true;
}

Step HttpServer::Impl::ReadRequest(Conn& c) {
  // "100 Continue" owed to a client that waits for it before its body.
  if (!c.out.empty() && !FlushOut(c)) return Step::kClosed;
  char buf[kReadChunk];
  while (true) {
    const Step parsed = Parse(c);
    if (parsed != Step::kWait) return parsed;
    size_t got = 0;
    const Io io = ReadSome(c, buf, sizeof(buf), &got);
    if (io == Io::kWantRead || io == Io::kWantWrite) {
      c.want = io;
      return Step::kWait;
    }
    if (io != Io::kOk) {
      Close(c);
      return Step::kClosed;
    }
    if (!c.header_started) {
      c.header_started = true;
      // A kept-alive connection's header deadline runs from its first byte
      // (the first request's from accept).
      if (c.requests > 0) {
        c.deadline_ns = NowNanos() + absl::ToInt64Nanoseconds(
                                         options_.limits.header_timeout);
      }
    }
    c.in.append(buf, got);
  }
}

Step HttpServer::Impl::Parse(Conn& c) {
  if (c.phase == Phase::kBody) return ParseBody(c);
  const size_t end = c.in.find("\r\n\r\n");
  c.request = HttpRequest();  // not the previous request's, even in a 431
  if (end == std::string::npos) {
    return c.in.size() > options_.max_header_bytes ? Reject(c, 431)
                                                   : Step::kWait;
  }
  if (end + 4 > options_.max_header_bytes) return Reject(c, 431);
  c.head = RequestHead();
  const int status = ParseRequestHead(
      absl::string_view(c.in).substr(0, end + 2), &c.request, &c.head);
  c.in.erase(0, end + 4);
  if (status != 0) return Reject(c, status);
  c.request.client_address = c.client;
  c.phase = Phase::kBody;
  c.deadline_ns =
      NowNanos() + absl::ToInt64Nanoseconds(options_.limits.body_timeout);
  if (c.head.content_length > options_.max_body_bytes) {
    // Read and drop a moderately oversized body, so the client reads the 413
    // instead of a reset; a huge one is refused at once.
    if (c.head.content_length >
        std::max<size_t>(4 * options_.max_body_bytes, size_t{4} << 20)) {
      return Reject(c, 413);
    }
    c.discarding = true;
    c.discard_left = c.head.content_length;
  } else if (c.head.expect_continue && c.head.content_length > 0 &&
             c.in.empty()) {
    c.out = "HTTP/1.1 100 Continue\r\n\r\n";
    if (!FlushOut(c)) return Step::kClosed;
  }
  return ParseBody(c);
}

Step HttpServer::Impl::ParseBody(Conn& c) {
  if (c.discarding) {
    const size_t n = std::min(c.in.size(), c.discard_left);
    c.in.erase(0, n);
    c.discard_left -= n;
    return c.discard_left == 0 ? Reject(c, 413) : Step::kWait;
  }
  if (c.in.size() < c.head.content_length) return Step::kWait;
  c.request.body = c.in.substr(0, c.head.content_length);
  c.in.erase(0, c.head.content_length);
  return Dispatch(c);
}

Step HttpServer::Impl::Dispatch(Conn& c) {
  const bool keep_alive = c.head.keep_alive && !stopping_.load() &&
                          c.requests + 1 < options_.keep_alive_max_requests;
  const HttpRoute* route = nullptr;
  bool path_known = false;
  for (const HttpRoute& r : routes_) {
    if (r.path != c.request.path) continue;
    path_known = true;
    if (r.method == c.request.method) route = &r;
  }
  if (route == nullptr) {
    HttpResponse response;
    response.status = path_known ? 405 : 404;
    response.body = absl::StrCat(ReasonPhrase(response.status), "\n");
    return Respond(c, response, !keep_alive);
  }
  ++requests_;
  c.phase = Phase::kProcessing;
  c.deadline_ns = kNoDeadline;  // the handler's own bounds apply
  {
    absl::MutexLock lock(&mu_);
    jobs_.push_back({c.id, &route->handler, std::move(c.request), keep_alive});
  }
  return Step::kWait;
}

Step HttpServer::Impl::Respond(Conn& c, const HttpResponse& response,
                               bool close) {
  c.out.append(SerializeResponse(response, close));
  c.close_after_write = close;
  c.phase = Phase::kWriting;
  c.deadline_ns =
      NowNanos() + absl::ToInt64Nanoseconds(options_.limits.write_timeout);
  ++c.requests;
  return Step::kContinue;
}

Step HttpServer::Impl::Reject(Conn& c, int status) {
  if (on_rejected_ && (status == 413 || status == 431)) {
    c.request.client_address = c.client;
    on_rejected_(c.request, status);
  }
  HttpResponse response;
  response.status = status;
  response.body = absl::StrCat(ReasonPhrase(status), "\n");
  c.discarding = false;
  c.in.clear();
  return Respond(c, response, /*close=*/true);
}

Step HttpServer::Impl::WriteResponse(Conn& c) {
  if (!FlushOut(c)) return Step::kClosed;
  if (!c.out.empty()) return Step::kWait;
  if (c.close_after_write || stopping_.load()) {
    Close(c);
    return Step::kClosed;
  }
  // Kept alive: the next request may already be buffered (here or inside
  // TLS); Parse and the next read find it.
  c.phase = Phase::kHeader;
  c.header_started = !c.in.empty();
  c.deadline_ns =
      NowNanos() + absl::ToInt64Nanoseconds(c.header_started
                                                ? options_.limits.header_timeout
                                                : options_.limits.idle_timeout);
  c.want = Io::kWantRead;
  return Step::kContinue;
}

void HttpServer::Impl::UpdateInterest(Conn& c) {
  uint32_t events = 0;
  switch (c.phase) {
    case Phase::kProcessing:
      break;
    case Phase::kWriting:
      events = c.want == Io::kWantRead ? EPOLLIN : EPOLLOUT;
      break;
    default:
      events = c.want == Io::kWantWrite ? EPOLLOUT : EPOLLIN;
      if (!c.out.empty()) events |= EPOLLOUT;
      break;
  }
  if (events == c.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

void HttpServer::Impl::Close(Conn& c) {
  --open_;  // before the peer can see the close: it then sees the count too
  auto it = per_client_.find(c.client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  if (c.ssl != nullptr) {
    if (c.phase != Phase::kHandshake) SSL_shutdown(c.ssl);  // best effort
    ERR_clear_error();
    SSL_free(c.ssl);
  }
  ::close(c.fd);
  conns_.erase(c.id);  // `c` is gone
}

void HttpServer::Impl::Sweep(int64_t now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, c] : conns_) {
    if (now >= c->deadline_ns) expired.push_back(id);
  }
  timed_out_ += static_cast<int64_t>(expired.size());
  for (uint64_t id : expired) Close(*conns_[id]);
  if (!listening_ && !stop_started_ && now >= accept_paused_until_)
    SetListening(true);
}

// One step of a shutdown: the first closes the listener and every connection
// without a request in flight. True while responses are still due (until
// write_timeout).
bool HttpServer::Impl::StopStep(int64_t now) {
  if (!stop_started_) {
    stop_started_ = true;
    stop_deadline_ =
        now + absl::ToInt64Nanoseconds(options_.limits.write_timeout);
    SetListening(false);
    std::vector<uint64_t> idle;
    for (const auto& [id, c] : conns_) {
      if (c->phase != Phase::kProcessing && c->phase != Phase::kWriting)
        idle.push_back(id);
    }
    for (uint64_t id : idle) Close(*conns_[id]);
  }
  return !conns_.empty() && now < stop_deadline_;
}

void HttpServer::Impl::OnCompletions() {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    auto it = conns_.find(d.conn_id);
    if (it == conns_.end()) continue;  // closed meanwhile
    Conn& c = *it->second;
    c.out.append(d.bytes);
    c.close_after_write = d.close;
    c.phase = Phase::kWriting;
    c.deadline_ns =
        NowNanos() + absl::ToInt64Nanoseconds(options_.limits.write_timeout);
    ++c.requests;
    Drive(c);
  }
}

void HttpServer::Impl::Work() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      // No deadline: an untimed Await follows no clock.
      mu_.Await(absl::Condition(this, &Impl::WorkReady));
      if (workers_stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    HttpResponse response;
    try {
      response = (*job.handler)(job.request);
    } catch (const std::exception& e) {
      response = HttpResponse();
      response.status = 500;
      response.body = "internal error\n";
    }
    const bool close = !job.keep_alive || response.close;
    Done done{job.conn_id, SerializeResponse(response, close), close};
    {
      absl::MutexLock lock(&mu_);
      done_.push_back(std::move(done));
    }
    Wake();
  }
}

void HttpServer::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_.store(true);
  if (loop_.joinable()) {
    Wake();
    loop_.join();
  }
  {
    absl::MutexLock lock(&mu_);
    workers_stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, std::vector<HttpRoute> routes,
    std::function<void(const HttpRequest&, int status)> on_rejected) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(routes),
                                     std::move(on_rejected));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port(); }
HttpServerStats HttpServer::Stats() const { return impl_->Stats(); }
void HttpServer::Shutdown() { impl_->Shutdown(); }

}  // namespace monta::http
