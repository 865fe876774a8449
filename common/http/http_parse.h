// HTTP/1.1 request heads in, responses out: the text part of common/http's
// server, without sockets (RFC 9112).
#ifndef MONTA_COMMON_HTTP_HTTP_PARSE_H_
#define MONTA_COMMON_HTTP_HTTP_PARSE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "common/http/http_server.h"

namespace monta::http {

// What the server needs from a request's head beyond the request itself.
struct RequestHead {
  size_t content_length = 0;
  bool keep_alive = true;        // the client allows another request
  bool expect_continue = false;  // "Expect: 100-continue"
};

// Parses `head`: the request line and header lines, each ending in CRLF,
// without the empty line. Fills `request` (method, target, path,
// minor_version, headers) and `out`. Returns 0, or the status to answer with:
// 400 (malformed, conflicting Content-Length), 411 (Transfer-Encoding: bodies
// need a Content-Length), 417 (an expectation other than 100-continue), 505
// (not HTTP/1.0 or 1.1).
int ParseRequestHead(absl::string_view head, HttpRequest* request,
                     RequestHead* out);

// The response's bytes: status line, Content-Type, Content-Length, its
// headers, Connection (close or keep-alive), then the body.
std::string SerializeResponse(const HttpResponse& response, bool close);

}  // namespace monta::http

#endif  // MONTA_COMMON_HTTP_HTTP_PARSE_H_
