#include "server/listen_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace monta {
namespace {

// One bind+listen on `info`, as the servers do (SO_REUSEADDR, no
// SO_REUSEPORT); empty on success, else strerror.
std::string TryListen(const addrinfo& info) {
  const int fd = socket(info.ai_family, info.ai_socktype, info.ai_protocol);
  if (fd < 0) return std::strerror(errno);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  std::string reason;
  if (bind(fd, info.ai_addr, info.ai_addrlen) != 0 || listen(fd, 1) != 0) {
    reason = std::strerror(errno);
  }
  close(fd);
  return reason;
}

}  // namespace

std::string ListenFailureReason(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "bad address (want host:port)";
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* results = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                   port.c_str(), &hints, &results);
  if (resolved != 0) {
    return absl::StrCat("cannot resolve ", host, ":", port, ": ",
                        gai_strerror(resolved));
  }
  std::string reason;
  for (const addrinfo* info = results; info != nullptr && reason.empty();
       info = info->ai_next) {
    reason = TryListen(*info);
  }
  freeaddrinfo(results);
  return reason.empty() ? "no reason found" : reason;
}

}  // namespace monta
