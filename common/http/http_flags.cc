#include "common/http/http_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(
    double, http_header_timeout_seconds, 5,
    "HTTP endpoints (/metrics, and the planner's webhook): a connection "
    "must deliver its whole request head (TLS handshake included) within "
    "this many seconds of connecting, or of the first byte of a "
    "kept-alive request; else it is closed, however steadily it trickles");
ABSL_FLAG(double, http_body_timeout_seconds, 10,
          "HTTP endpoints: the whole request body must arrive within this "
          "many seconds after the head");
ABSL_FLAG(double, http_idle_timeout_seconds, 5,
          "HTTP endpoints: a kept-alive connection waiting for its next "
          "request is closed after this many seconds");
ABSL_FLAG(double, http_write_timeout_seconds, 10,
          "HTTP endpoints: a response must be taken by the client within "
          "this many seconds");
ABSL_FLAG(int, http_max_connections, 4096,
          "HTTP endpoints: open connections per endpoint; more are closed "
          "at once");
ABSL_FLAG(int, http_max_connections_per_client, 64,
          "HTTP endpoints: open connections per client IP address per "
          "endpoint; more are closed at once");

namespace monta::http {

absl::StatusOr<HttpLimits> HttpLimitsFromFlags() {
  return HttpLimits::FromFlags(
      absl::GetFlag(FLAGS_http_header_timeout_seconds),
      absl::GetFlag(FLAGS_http_body_timeout_seconds),
      absl::GetFlag(FLAGS_http_idle_timeout_seconds),
      absl::GetFlag(FLAGS_http_write_timeout_seconds),
      absl::GetFlag(FLAGS_http_max_connections),
      absl::GetFlag(FLAGS_http_max_connections_per_client));
}

}  // namespace monta::http
