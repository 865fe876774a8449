#include "perf/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace monta::perf {
namespace {

constexpr uint32_t kMaxBytes = 1 << 20;

absl::StatusOr<sockaddr_in> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535 ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous address '", address, "': expected IPv4 host:port"));
  }
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, char* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = recv(fd, out + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void AppendString(std::string& out, absl::string_view s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(s.data(), s.size());
}

bool ReadString(int fd, std::string& out) {
  unsigned char len[4];
  if (!ReadAll(fd, reinterpret_cast<char*>(len), 4)) return false;
  const uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) |
                     (static_cast<uint32_t>(len[3]) << 24);
  if (n > kMaxBytes) return false;
  out.resize(n);
  return ReadAll(fd, out.data(), n);
}

// Bounds each read and write of a connection, so a silent peer cannot stall.
void SetIoTimeout(int fd, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const std::string& address) {
  absl::StatusOr<sockaddr_in> sa = ParseAddress(address);
  if (!sa.ok()) return sa.status();
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("rendezvous server: socket()");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(*sa);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&*sa), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("rendezvous server on ", address, ": ", why));
  }
  return std::unique_ptr<TcpStoreServer>(
      new TcpStoreServer(fd, ntohs(sa->sin_port)));
}

TcpStoreServer::TcpStoreServer(int fd, int port) : listen_fd_(fd), port_(port) {
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  // Wakes the blocked accept().
  shutdown(listen_fd_, SHUT_RDWR);
  thread_.join();
  close(listen_fd_);
}

void TcpStoreServer::Serve() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    // Requests are tiny and never wait, so one at a time is enough.
    SetIoTimeout(fd, absl::Seconds(5));
    Handle(fd);
    close(fd);
  }
}

void TcpStoreServer::Handle(int fd) {
  char op = 0;
  std::string key, value;
  if (!ReadAll(fd, &op, 1) || !ReadString(fd, key)) return;
  std::string reply;
  if (op == 'S') {
    if (!ReadString(fd, value)) return;
    absl::MutexLock lock(&mu_);
    values_[key] = std::move(value);
    reply = "K";
  } else if (op == 'G') {
    absl::MutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      reply = "N";
    } else {
      reply = "Y";
      AppendString(reply, it->second);
    }
  } else {
    return;
  }
  WriteAll(fd, reply);
}

TcpStore::TcpStore(std::string address) : address_(std::move(address)) {}

absl::StatusOr<std::pair<char, std::string>> TcpStore::Call(
    const std::string& request, absl::Time deadline) {
  absl::StatusOr<sockaddr_in> sa = ParseAddress(address_);
  if (!sa.ok()) return sa.status();
  std::string last_error = "not tried";
  while (true) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError("rendezvous client: socket()");
    SetIoTimeout(fd, absl::Seconds(5));
    std::pair<char, std::string> reply;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) ==
            0 &&
        WriteAll(fd, request) && ReadAll(fd, &reply.first, 1) &&
        (reply.first != 'Y' || ReadString(fd, reply.second))) {
      close(fd);
      return reply;
    }
    last_error = std::strerror(errno);
    close(fd);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous server ", address_, " unreachable: ", last_error));
    }
    absl::SleepFor(absl::Milliseconds(20));  // not up yet: retry
  }
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  std::string request = "S";
  AppendString(request, key);
  AppendString(request, value);
  // A server that is still starting gets a minute to come up.
  absl::StatusOr<std::pair<char, std::string>> reply =
      Call(request, absl::Now() + absl::Minutes(1));
  if (!reply.ok()) return reply.status();
  if (reply->first != 'K') return absl::InternalError("rendezvous: bad reply");
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                          absl::Time deadline) {
  std::string request = "G";
  AppendString(request, key);
  while (true) {
    absl::StatusOr<std::pair<char, std::string>> reply =
        Call(request, deadline);
    if (!reply.ok()) return reply.status();
    if (reply->first == 'Y') return std::move(reply->second);
    if (reply->first != 'N')
      return absl::InternalError("rendezvous: bad reply");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key '", key, "' was not set by the deadline"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace monta::perf
