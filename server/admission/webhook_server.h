// The admission webhook's HTTPS server: POST /mutate and /validate
// (AdmissionReview v1, answered by an AdmissionHandler) and GET /healthz, on
// common/http's server (epoll, non-blocking OpenSSL).
//
// Bounded everywhere so answers stay well inside the API server's timeout and
// slow clients cannot hold it (see common/http/http_server.h): a connection
// costs no thread until its request is complete; the TLS handshake and headers
// must arrive within limits.header_timeout, the body within body_timeout, a
// response go out within write_timeout; connections are capped per client
// address and in all (excess closed at once); bodies over max_body_bytes get
// 413. A few worker threads run the handler.
//
// TLS: certificate chain and key are PEM files. They are checked for changes at
// most every cert_check_interval (on a handshake) and re-read when they change,
// so cert-manager's renewals take effect without a restart; a pair that does
// not load (or does not match) is ignored and the previous one kept.
#ifndef MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_
#define MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http/http_server.h"
#include "server/admission/admission_handler.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace monta::admission {

struct WebhookOptions {
  // host:port ("0.0.0.0:8443", "[::]:8443"); port 0 picks a free one.
  std::string address = "0.0.0.0:8443";
  std::string tls_cert_file;  // PEM: leaf first, then intermediates
  std::string tls_key_file;   // PEM private key
  // PEM CA bundle; when set, a client must present a certificate it signed
  // (the API server's webhook client certificate, see deploy/README.md) or
  // the handshake fails. Read once at start.
  std::string client_ca_file;
  size_t max_body_bytes = 1 << 20;
  // Run the handler; slow connections never hold them.
  int worker_threads = 4;
  // Deadlines and connection caps (the planner's --http_* flags).
  http::HttpLimits limits;
  int keep_alive_max_requests = 100;
  // Kernel accept queue (capped by net.core.somaxconn).
  int listen_backlog = 1024;
  absl::Duration cert_check_interval = absl::Seconds(10);
};

class CertStore;

class WebhookServer {
 public:
  // Loads the certificate, binds and starts serving. `handler` is not owned and
  // must outlive the server. INVALID_ARGUMENT for unusable TLS files,
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WebhookServer>> Start(
      WebhookOptions options, const AdmissionHandler* handler);
  ~WebhookServer();

  int port() const { return server_->port(); }

  // Stops accepting, closes connections waiting for a request, finishes the
  // requests in flight and joins the threads.
  void Shutdown();

  http::HttpServerStats Stats() const { return server_->Stats(); }

 private:
  WebhookServer() = default;

  WebhookOptions options_;
  std::unique_ptr<CertStore> certs_;
  // Declared before server_, so destroyed after it.
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> tls_{nullptr, nullptr};
  std::unique_ptr<http::HttpServer> server_;
};

// Splits "host:port" / "[v6]:port". INVALID_ARGUMENT when malformed.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port);

}  // namespace monta::admission

#endif  // MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_
