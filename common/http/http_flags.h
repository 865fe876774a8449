// The --http_* flags every binary with an HTTP endpoint takes (the planner's
// /metrics and webhook, the agent's /metrics), defined once so the two binaries
// cannot drift apart.
#ifndef MONTA_COMMON_HTTP_HTTP_FLAGS_H_
#define MONTA_COMMON_HTTP_HTTP_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/http/http_server.h"

namespace monta::http {

// The limits the --http_* flags give, INVALID_ARGUMENT naming the flag when
// one is out of range (see HttpLimits::FromFlags).
absl::StatusOr<HttpLimits> HttpLimitsFromFlags();

}  // namespace monta::http

#endif  // MONTA_COMMON_HTTP_HTTP_FLAGS_H_
