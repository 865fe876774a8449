#include "server/admission/webhook_server.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace monta::admission {

namespace {

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

}  // namespace

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
    absl::MutexLock lock(&store->mu_);
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
    absl::MutexLock lock(&mu_);
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
  absl::Mutex mu_;
  std::shared_ptr<const Material> current_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_check_ ABSL_GUARDED_BY(mu_);
};

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port) {
  return http::SplitHostPort(address, "webhook address", host, port);
}

namespace {

std::vector<http::HttpRoute> Routes(const AdmissionHandler* handler) {
  auto serve = [handler](Operation op) {
    return [handler, op](const http::HttpRequest& request) {
      HttpReply reply = handler->Handle(op, request.body);
      http::HttpResponse response;
      response.status = reply.status;
      response.content_type = reply.content_type;
      response.body = std::move(reply.body);
      return response;
    };
  };
  std::vector<http::HttpRoute> routes;
  routes.push_back({"POST", "/mutate", serve(Operation::kMutate)});
  routes.push_back({"POST", "/validate", serve(Operation::kValidate)});
  routes.push_back({"GET", "/healthz", [](const http::HttpRequest&) {
                      http::HttpResponse response;
                      response.body = "ok\n";
                      return response;
                    }});
  return routes;
}

// Makes `ctx` require a client certificate signed by a CA of `ca_file`.
bool RequireClientCertificates(SSL_CTX& ctx, const std::string& ca_file) {
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca_file.c_str());
  if (names == nullptr ||
      SSL_CTX_load_verify_locations(&ctx, ca_file.c_str(), nullptr) != 1) {
    if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
    return false;
  }
  SSL_CTX_set_client_CA_list(&ctx, names);  // takes ownership
  SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  return true;
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
  const std::string& client_ca = s->options_.client_ca_file;
  if (!client_ca.empty() && ::access(client_ca.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--webhook_client_ca_file ", client_ca,
                     ": cannot read: ", std::strerror(errno)));
  }
  s->tls_ = {SSL_CTX_new(TLS_server_method()), SSL_CTX_free};
  // With a client CA every connection's handshake verifies the client's
  // certificate against it and fails without one (common/http closes it).
  if (s->tls_ == nullptr || !s->certs_->SetUpContext(*s->tls_) ||
      (!client_ca.empty() && !RequireClientCertificates(*s->tls_, client_ca))) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook: TLS setup failed: ", OpenSslError()));
  }
  http::HttpServerOptions http_options;
  http_options.address = s->options_.address;
  http_options.name = "webhook address";
  http_options.limits = s->options_.limits;
  http_options.max_body_bytes = s->options_.max_body_bytes;
  http_options.worker_threads = s->options_.worker_threads;
  http_options.keep_alive_max_requests = s->options_.keep_alive_max_requests;
  http_options.listen_backlog = s->options_.listen_backlog;
  http_options.tls = s->tls_.get();
  // An oversized review never reaches the handler; count it as refused.
  auto on_rejected = [handler](const http::HttpRequest& request, int status) {
    if (status != 413) return;
    if (request.path == "/mutate") handler->RecordRefused(Operation::kMutate);
    if (request.path == "/validate")
      handler->RecordRefused(Operation::kValidate);
  };
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Start(std::move(http_options), Routes(handler),
                              std::move(on_rejected));
  if (!server.ok()) return server.status();
  s->server_ = *std::move(server);
  return s;
}

void WebhookServer::Shutdown() {
  if (server_ != nullptr) server_->Shutdown();
}

WebhookServer::~WebhookServer() { Shutdown(); }

}  // namespace monta::admission
