#include "common/http/http_parse.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace monta::http {
namespace {

// RFC 9110 token characters (method and header names).
bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c)) continue;
    if (absl::string_view("!#$%&'*+-.^_`|~").find(ch) ==
        absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

absl::string_view TrimBlanks(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// The request line "METHOD SP target SP HTTP/1.x"; 0 or a status.
int ParseRequestLine(absl::string_view line, HttpRequest* request) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty() ||
      parts[1].front() != '/') {
    return 400;
  }
  for (char c : parts[1]) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return 400;
  }
  if (parts[2] == "HTTP/1.1") {
    request->minor_version = 1;
  } else if (parts[2] == "HTTP/1.0") {
    request->minor_version = 0;
  } else {
    return absl::StartsWith(parts[2], "HTTP/") ? 505 : 400;
  }
  request->method = std::string(parts[0]);
  request->target = std::string(parts[1]);
  request->path = request->target.substr(0, request->target.find('?'));
  return 0;
}

// The headers that shape the exchange: Content-Length, Transfer-Encoding,
// Connection, Expect. 0 or a status.
int ApplyHeader(absl::string_view name, absl::string_view value,
                bool* have_length, bool* close_token, bool* keep_alive_token,
                RequestHead* out) {
  if (name == "content-length") {
    size_t n = 0;
    if (value.empty() || value.size() > 15 ||
        !std::all_of(value.begin(), value.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(value, &n) ||
        (*have_length && n != out->content_length)) {
      return 400;
    }
    *have_length = true;
    out->content_length = n;
  } else if (name == "transfer-encoding") {
    return 411;
  } else if (name == "connection") {
    for (absl::string_view token : absl::StrSplit(value, ',')) {
      token = TrimBlanks(token);
      if (absl::EqualsIgnoreCase(token, "close")) *close_token = true;
      if (absl::EqualsIgnoreCase(token, "keep-alive")) *keep_alive_token = true;
    }
  } else if (name == "expect") {
    if (!absl::EqualsIgnoreCase(value, "100-continue")) return 417;
    out->expect_continue = true;
  }
  return 0;
}

}  // namespace

int ParseRequestHead(absl::string_view head, HttpRequest* request,
                     RequestHead* out) {
  *out = RequestHead();
  if (!absl::EndsWith(head, "\r\n")) return 400;
  head.remove_suffix(2);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (int status = ParseRequestLine(lines[0], request); status != 0)
    return status;
  bool have_length = false, close_token = false, keep_alive_token = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    const size_t colon = line.find(':');
    // No obsolete line folding, no blanks before the colon (RFC 9112 5.1).
    if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon)))
      return 400;
    std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    const absl::string_view value = TrimBlanks(line.substr(colon + 1));
    if (int status = ApplyHeader(name, value, &have_length, &close_token,
                                 &keep_alive_token, out);
        status != 0) {
      return status;
    }
    request->headers.emplace_back(std::move(name), std::string(value));
  }
  out->keep_alive =
      request->minor_version == 1 ? !close_token : keep_alive_token;
  return 0;
}

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

std::string SerializeResponse(const HttpResponse& response, bool close) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ",
                                 ReasonPhrase(response.status), "\r\n");
  if (!response.content_type.empty())
    absl::StrAppend(&out, "Content-Type: ", response.content_type, "\r\n");
  absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  absl::StrAppend(&out, "Connection: ", close ? "close" : "keep-alive",
                  "\r\n\r\n", response.body);
  return out;
}

}  // namespace monta::http
