// A small HTTP/1.1 server that slow or greedy clients cannot hold: the edge of
// every Monta HTTP endpoint (the admission webhook over TLS, both /metrics).
//
// One event thread owns every socket (epoll, non-blocking; TLS through
// OpenSSL's non-blocking SSL_accept/SSL_read/SSL_write). It accepts, reads and
// parses requests, and hands only complete requests to a small pool of worker
// threads; their responses go back to the event thread, which writes them. A
// connection that trickles its bytes therefore costs a socket and a buffer,
// never a thread.
//
// Bounds (HttpLimits), each a whole-phase deadline that trickled bytes cannot
// extend:
// - header_timeout: from accept (TLS handshake included), or from the first
//   byte of a kept-alive connection's next request, to the end of the headers;
// - body_timeout: from the end of the headers to the end of the body;
// - idle_timeout: a kept-alive connection waiting for its next request;
// - write_timeout: from the first byte of a response to its last;
// - max_connections in all and max_connections_per_client per client address:
//   a connection over either cap is closed at once, before reading anything.
// A connection past a deadline is closed without an answer. Start raises the
// process's soft open-file limit towards the hard one when max_connections
// needs it (as Go's runtime does at start). Bodies over
// max_body_bytes get 413, headers over max_header_bytes 431; request bodies
// must carry Content-Length (chunked requests get 411).
#ifndef MONTA_COMMON_HTTP_HTTP_SERVER_H_
#define MONTA_COMMON_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace monta::http {

// The bounds that keep slow clients from holding an endpoint. The binaries set
// them from their --http_* flags (the names Validate reports).
struct HttpLimits {
  absl::Duration header_timeout = absl::Seconds(5);
  absl::Duration body_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(10);
  int max_connections = 4096;
  int max_connections_per_client = 64;

  // INVALID_ARGUMENT naming the --http_* flag of a value out of range.
  absl::Status Validate() const;

  // From the binaries' --http_* flag values (seconds and counts), validated.
  static absl::StatusOr<HttpLimits> FromFlags(double header_timeout_seconds,
                                              double body_timeout_seconds,
                                              double idle_timeout_seconds,
                                              double write_timeout_seconds,
                                              int max_connections,
                                              int max_connections_per_client);
};

struct HttpServerOptions {
  // host:port ("0.0.0.0:8443", "[::]:8443"); port 0 picks a free one.
  std::string address;
  // Names the endpoint in errors ("webhook address", "--metrics_listen").
  std::string name = "http address";
  HttpLimits limits;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  int worker_threads = 2;
  // A kept-alive connection is closed after this many requests.
  int keep_alive_max_requests = 100;
  // Kernel accept queue (capped by net.core.somaxconn).
  int listen_backlog = 1024;
  // TLS when set (not owned; must outlive the server): its certificate
  // callbacks run on the event thread.
  SSL_CTX* tls = nullptr;
};

struct HttpRequest {
  std::string method;
  std::string target;     // as sent: path and query
  std::string path;       // target up to '?'
  int minor_version = 1;  // HTTP/1.<minor_version>
  // Lower-cased names, values without surrounding blanks, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string client_address;  // the peer's IP address

  // The first header named `name` (lower case), or "".
  absl::string_view Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this response
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpRoute {
  std::string method;  // "GET", "POST"
  std::string path;    // exact match
  HttpHandler handler;
};

// What the server did, for tests and diagnostics.
struct HttpServerStats {
  int64_t accepted = 0;
  int64_t refused_total_cap = 0;
  int64_t refused_client_cap = 0;
  int64_t timed_out = 0;  // closed at a deadline
  int64_t requests = 0;   // handed to a route
  int open = 0;           // connections open now
};

class HttpServer {
 public:
  // Binds and starts serving `routes` (an unknown path gets 404, a known one
  // with another method 405). `on_rejected` (optional) hears of requests
  // answered without their route because of their size (413, 431), on the
  // event thread. UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      HttpServerOptions options, std::vector<HttpRoute> routes,
      std::function<void(const HttpRequest&, int status)> on_rejected = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  HttpServerStats Stats() const;

  // Stops accepting, closes connections that wait for a request, finishes the
  // requests in flight (their responses bounded by write_timeout) and joins
  // the threads. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" / "[v6]:port". INVALID_ARGUMENT naming `what` when
// malformed.
absl::Status SplitHostPort(const std::string& address, absl::string_view what,
                           std::string* host, int* port);

// The reason phrase of a status code ("Not Found").
absl::string_view ReasonPhrase(int status);

}  // namespace monta::http

#endif  // MONTA_COMMON_HTTP_HTTP_SERVER_H_
