#include "server/admission/webhook_server.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/std_mutex.h"

// Debian's libcpp-httplib is a compiled library built with these; the header
// must see the same configuration.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#error "build with //third_party:httplib (defines CPPHTTPLIB_OPENSSL_SUPPORT)"
#endif
#include "httplib.h"

namespace monta::admission {

namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Identity of a file's current content, as far as stat can tell.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp& o) const {
    return dev == o.dev && ino == o.ino && size == o.size &&
           mtime_ns == o.mtime_ns;
  }
};

FileStamp Stamp(const std::string& path) {
  FileStamp s;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {  // follows the secret volume's symlinks
    s.dev = st.st_dev;
    s.ino = st.st_ino;
    s.size = st.st_size;
    s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                 st.st_mtim.tv_nsec;
  }
  return s;
}

// Worker pool with a bounded queue of accepted connections: when it is full,
// enqueue (called by httplib's accept loop) waits, so the backlog absorbs
// bursts instead of an unbounded in-process queue. `oldest` holds when the
// longest-waiting connection was queued (NowNanos; 0 = none waits), for the
// handlers' fairness rule.
class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, int max_pending,
                   std::shared_ptr<std::atomic<int64_t>> oldest)
      : max_pending_(std::max(1, max_pending)), oldest_(std::move(oldest)) {
    for (int i = 0; i < std::max(1, threads); ++i)
      workers_.emplace_back([this] { Work(); });
  }
  ~BoundedTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      StdMutexLock lock(&mu_);
      lock.Wait(room_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return HasRoom();
      });
      queue_.push_back({std::move(fn), NowNanos()});
      UpdateOldest();
    }
    work_.notify_one();
  }

  void shutdown() override {
    {
      StdMutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    work_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(queue_.size()) < max_pending_;
  }
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  }
  void UpdateOldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    oldest_->store(queue_.empty() ? 0 : queue_.front().second,
                   std::memory_order_relaxed);
  }

  void Work() {
    while (true) {
      std::function<void()> fn;
      {
        StdMutexLock lock(&mu_);
        lock.Wait(work_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return HasWorkOrStopping();
        });
        if (queue_.empty())
          return;  // stopping, and everything accepted was served
        fn = std::move(queue_.front().first);
        queue_.pop_front();
        UpdateOldest();
      }
      room_.notify_one();
      fn();
    }
  }

  const int max_pending_;
  const std::shared_ptr<std::atomic<int64_t>> oldest_;
  // std::mutex (annotated) rather than absl::Mutex: the system Abseil is not
  // built with TSAN, which then cannot see its synchronization.
  mutable StdMutex mu_;
  std::condition_variable room_;  // queue_ shrank
  std::condition_variable work_;  // queue_ grew, or stopping_
  // Accepted connections and when they were queued (NowNanos).
  std::deque<std::pair<std::function<void()>, int64_t>> queue_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace

// httplib's compiled-in listen backlog is 5: a burst of new connections (the
// API server opening several at once, or reconnecting after keep-alive limits)
// would overflow it and wait out a 1 s SYN retransmit. listen() again with a
// deeper one.
class ListeningSslServer : public httplib::SSLServer {
 public:
  using httplib::SSLServer::SSLServer;
  bool DeepenBacklog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

// The current certificate chain and key, re-read when the files change.
class CertStore {
 public:
  static absl::StatusOr<std::unique_ptr<CertStore>> Load(
      std::string cert_file, std::string key_file,
      absl::Duration check_interval) {
    std::unique_ptr<CertStore> store(new CertStore(
        std::move(cert_file), std::move(key_file), check_interval));
    absl::StatusOr<std::shared_ptr<const Material>> m = store->Read();
    if (!m.ok()) return m.status();
    StdMutexLock lock(&store->mu_);
    store->current_ = *std::move(m);
    store->next_check_ = std::chrono::steady_clock::now() +
                         absl::ToChronoNanoseconds(check_interval);
    return store;
  }

  // Sets up a server context: TLS >= 1.2, the current pair, and a certificate
  // callback that installs the newest pair on every handshake.
  bool SetUpContext(SSL_CTX& ctx) {
    SSL_CTX_set_options(&ctx,
                        SSL_OP_NO_COMPRESSION |
                            SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION |
                            SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return false;
    std::shared_ptr<const Material> m = Current();
    if (SSL_CTX_use_cert_and_key(&ctx, m->leaf, m->key, m->chain, 1) != 1)
      return false;
    SSL_CTX_set_cert_cb(
        &ctx,
        [](SSL* ssl, void* arg) {
          return static_cast<CertStore*>(arg)->Install(ssl);
        },
        this);
    return true;
  }

 private:
  struct Material {
    X509* leaf = nullptr;
    STACK_OF(X509) * chain = nullptr;
    EVP_PKEY* key = nullptr;
    FileStamp cert_stamp, key_stamp;
    ~Material() {
      X509_free(leaf);
      sk_X509_pop_free(chain, X509_free);
      EVP_PKEY_free(key);
    }
  };

  CertStore(std::string cert_file, std::string key_file,
            absl::Duration check_interval)
      : cert_file_(std::move(cert_file)),
        key_file_(std::move(key_file)),
        check_interval_(check_interval) {}

  absl::StatusOr<std::shared_ptr<const Material>> Read() const {
    auto m = std::make_shared<Material>();
    m->cert_stamp = Stamp(cert_file_);
    m->key_stamp = Stamp(key_file_);
    ERR_clear_error();
    BIO* bio = BIO_new_file(cert_file_.c_str(), "r");
    if (bio == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS certificate ", cert_file_, ": cannot be read"));
    }
    m->leaf = PEM_read_bio_X509_AUX(bio, nullptr, nullptr, nullptr);
    m->chain = sk_X509_new_null();
    if (m->leaf != nullptr) {
      while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
        sk_X509_push(m->chain, ca);
      }
    }
    BIO_free(bio);
    ERR_clear_error();  // the end of the chain reads as an error
    if (m->leaf == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS certificate ", cert_file_, ": no PEM certificate"));
    }
    bio = BIO_new_file(key_file_.c_str(), "r");
    if (bio == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS key ", key_file_, ": cannot be read"));
    }
    m->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (m->key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("TLS key ", key_file_,
                                                     ": no PEM private key (",
                                                     OpenSslError(), ")"));
    }
    if (X509_check_private_key(m->leaf, m->key) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat(
          "TLS key ", key_file_, " does not match certificate ", cert_file_));
    }
    return std::shared_ptr<const Material>(std::move(m));
  }

  std::shared_ptr<const Material> Current() {
    StdMutexLock lock(&mu_);
    // Monotonic: a wall clock step back must not postpone a rotation.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check_) {
      next_check_ = now + absl::ToChronoNanoseconds(check_interval_);
      if (!(Stamp(cert_file_) == current_->cert_stamp) ||
          !(Stamp(key_file_) == current_->key_stamp)) {
        absl::StatusOr<std::shared_ptr<const Material>> m = Read();
        if (m.ok()) {
          current_ = *std::move(m);
          std::fprintf(
              stderr,
              "monta-planner: webhook TLS certificate reloaded from %s\n",
              cert_file_.c_str());
        } else {
          std::fprintf(stderr,
                       "monta-planner: webhook TLS reload failed, keeping the "
                       "old pair: %s\n",
                       std::string(m.status().message()).c_str());
        }
      }
    }
    return current_;
  }

  int Install(SSL* ssl) {
    std::shared_ptr<const Material> m = Current();
    // Takes its own references; `m` may go away after this.
    return SSL_use_cert_and_key(ssl, m->leaf, m->key, m->chain, 1) == 1 ? 1 : 0;
  }

  const std::string cert_file_;
  const std::string key_file_;
  const absl::Duration check_interval_;
  StdMutex mu_;  // see BoundedTaskQueue::mu_
  std::shared_ptr<const Material> current_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_check_ ABSL_GUARDED_BY(mu_);
};

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook address \"", address, "\": expected host:port"));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535 ||
      h.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook address \"", address,
                     "\": expected host:port with port 0..65535"));
  }
  *host = std::move(h);
  *port = p;
  return absl::OkStatus();
}

namespace {

// Worker pool, body limit, timeouts and keep-alive from `o`. `oldest` is
// shared with the handlers, which read how long the oldest connection waits.
void ConfigureLimits(ListeningSslServer& server, const WebhookOptions& o,
                     std::shared_ptr<std::atomic<int64_t>> oldest) {
  const int threads = o.worker_threads;
  const int pending = o.max_pending_connections;
  server.new_task_queue = [threads, pending, oldest] {
    return new BoundedTaskQueue(threads, pending, oldest);
  };
  server.set_payload_max_length(o.max_body_bytes);
  server.set_read_timeout(absl::ToChronoMicroseconds(o.read_timeout));
  server.set_write_timeout(absl::ToChronoMicroseconds(o.write_timeout));
  server.set_keep_alive_timeout(o.keep_alive_seconds);
  server.set_keep_alive_max_count(
      static_cast<size_t>(std::max(1, o.keep_alive_max_requests)));
  server.set_tcp_nodelay(true);
}

// /mutate and /validate through `handler`, /healthz, and the error and
// exception handlers.
void AddRoutes(ListeningSslServer& server, const AdmissionHandler* handler,
               std::shared_ptr<std::atomic<int64_t>> oldest,
               absl::Duration fair_queue_wait) {
  const int64_t close_after_ns = absl::ToInt64Nanoseconds(fair_queue_wait);
  auto serve = [handler, oldest, close_after_ns](Operation op) {
    return [handler, oldest, close_after_ns, op](const httplib::Request& req,
                                                 httplib::Response& res) {
      HttpReply reply = handler->Handle(op, req.body);
      res.status = reply.status;
      res.set_content(reply.body, reply.content_type);
      // Fairness: a kept-alive connection holds its worker between requests;
      // when another connection has waited for a worker longer than
      // fair_queue_wait, ask this client to reconnect (it goes to the back of
      // the queue) instead of serving it again.
      const int64_t queued = oldest->load(std::memory_order_relaxed);
      if (queued != 0 && NowNanos() - queued > close_after_ns) {
        res.set_header("Connection", "close");
      }
    };
  };
  server.Post("/mutate", serve(Operation::kMutate));
  server.Post("/validate", serve(Operation::kValidate));
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  httplib::Server::HandlerWithResponse on_error =
      [handler](const httplib::Request& req, httplib::Response& res) {
        // httplib answers an oversized body with 413 before any handler runs.
        if (res.status == 413 &&
            (req.path == "/mutate" || req.path == "/validate")) {
          handler->RecordRefused(req.path == "/mutate" ? Operation::kMutate
                                                       : Operation::kValidate);
        }
        return httplib::Server::HandlerResponse::Unhandled;
      };
  server.set_error_handler(on_error);
  httplib::Server::ExceptionHandler on_exception =
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content("internal error\n", "text/plain");
      };
  server.set_exception_handler(on_exception);
}

// Binds host:port (port 0: any free one) with the configured backlog; returns
// the port.
absl::StatusOr<int> Bind(ListeningSslServer& server, const std::string& host,
                         int port, const WebhookOptions& o) {
  int bound = 0;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("webhook address ", o.address, ": cannot listen"));
  }
  if (!server.DeepenBacklog(o.listen_backlog)) {
    return absl::UnavailableError(
        absl::StrCat("webhook address ", o.address,
                     ": listen backlog: ", std::strerror(errno)));
  }
  return bound;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WebhookServer>> WebhookServer::Start(
    WebhookOptions options, const AdmissionHandler* handler) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(options.address, &host, &port); !s.ok())
    return s;
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "webhook: a TLS certificate and key file are required");
  }
  std::unique_ptr<WebhookServer> s(new WebhookServer());
  s->options_ = std::move(options);
  absl::StatusOr<std::unique_ptr<CertStore>> certs =
      CertStore::Load(s->options_.tls_cert_file, s->options_.tls_key_file,
                      s->options_.cert_check_interval);
  if (!certs.ok()) return certs.status();
  s->certs_ = *std::move(certs);
  CertStore* store = s->certs_.get();
  auto owned = std::make_unique<ListeningSslServer>(
      [store](SSL_CTX& ctx) { return store->SetUpContext(ctx); });
  ListeningSslServer& server = *owned;
  s->server_ = std::move(owned);
  if (!server.is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook: TLS setup failed: ", OpenSslError()));
  }
  auto oldest = std::make_shared<std::atomic<int64_t>>(0);
  ConfigureLimits(server, s->options_, oldest);
  AddRoutes(server, handler, oldest, s->options_.fair_queue_wait);

  absl::StatusOr<int> bound = Bind(server, host, port, s->options_);
  if (!bound.ok()) return bound.status();
  s->port_ = *bound;
  s->listener_ = std::thread([srv = &server] { srv->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so that
  // Shutdown() right after Start() cannot miss it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server.is_running() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(1));
  if (!server.is_running()) {
    s->Shutdown();
    return absl::UnavailableError("webhook: the accept loop did not start");
  }
  return s;
}

void WebhookServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

WebhookServer::~WebhookServer() { Shutdown(); }

}  // namespace monta::admission
