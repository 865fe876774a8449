// Test helper (client_test): holds a key on a lease kept alive by
// LeaseKeepAlive, in a process of its own so the test can SIGSTOP the client
// side. Prints "held <lease id>" once the key is written, then waits; when the
// keepalive reports the lease lost it prints "lost: <why>" and exits 3.
//
// Usage: etcd_lease_holder ENDPOINT KEY TTL_SECONDS
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "server/etcd/client.h"
#include "server/etcd/lease_keepalive.h"

int main(int argc, char** argv) {
  int ttl_seconds = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[3], &ttl_seconds)) {
    std::fprintf(stderr, "usage: etcd_lease_holder ENDPOINT KEY TTL_SECONDS\n");
    return 2;
  }
  monta::etcd::ClientOptions options;
  options.endpoints = {argv[1]};
  options.security.insecure = true;
  auto client = monta::etcd::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  auto lease = (*client)->GrantLease(absl::Seconds(ttl_seconds));
  if (!lease.ok()) {
    std::fprintf(stderr, "%s\n", lease.status().ToString().c_str());
    return 1;
  }
  monta::MonoNotification lost;
  auto keepalive =
      (*client)->KeepAlive(*lease, [&](const absl::Status&) { lost.Notify(); });
  if (!keepalive.ok()) return 1;
  if (auto put = (*client)->Put(argv[2], "held", lease->id); !put.ok()) {
    std::fprintf(stderr, "%s\n", put.status().ToString().c_str());
    return 1;
  }
  std::printf("held %lld\n", static_cast<long long>(lease->id));
  std::fflush(stdout);
  while (!lost.WaitForNotificationWithTimeout(absl::Seconds(1))) {
  }
  std::printf("lost: %s\n", (*keepalive)->status().ToString().c_str());
  std::fflush(stdout);
  return 3;
}
