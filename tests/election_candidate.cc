// Test helper (//tests:election_test): one replica campaigning in a process of
// its own, so the test can SIGKILL, SIGSTOP and SIGTERM it. It prints one line
// per event, flushed, each with the monotonic clock (CLOCK_MONOTONIC is one
// clock for every process of the host) in nanoseconds:
//
//   CANDIDATE <id> t=<ns>
//   FOLLOWER leader=<id> t=<ns>        following (again, or behind a new
//   leader) LEADER <epoch> t=<ns>              on_leading STOPPED <epoch>
//   <code> t=<ns> <why>  on_stopped_leading WRITE <a|b> <key>
//   <ok|refused|error> sent=<ns> done=<ns> ep=<endpoint>
//         [<status>]   (ep: the endpoint the client tries first next)
//   RESIGNED <code> took_ms=<ms> t=<ns>  after SIGTERM: Resign, then exit 0
//
// Writes (--write_interval_ms > 0): while leading, and for
// --writes_after_loss ticks after losing, each tick puts two keys
// <prefix>/writes/<id>/<epoch>/<seq>{a,b}: "a" through Election::FencedTxn
// (checked locally, then fenced in etcd), "b" through the fence captured when
// it started leading (election::FencedTxn: etcd's compare alone, as a write
// that passed the local check just before the process was paused).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/signals.h"
#include "server/election/election.h"
#include "server/election/fence.h"
#include "server/etcd/client.h"

ABSL_FLAG(std::string, endpoints, "", "etcd endpoints, comma-separated");
ABSL_FLAG(std::string, prefix, "/monta", "the election's key prefix");
ABSL_FLAG(std::string, id, "", "this replica's id");
ABSL_FLAG(int, ttl_seconds, 2, "the lease's TTL");
ABSL_FLAG(int, write_interval_ms, 0, "fenced writes every this often; 0: none");
ABSL_FLAG(int, writes_after_loss, 5, "write ticks after losing leadership");
ABSL_FLAG(int, request_timeout_ms, 2000, "etcd request timeout");

namespace {

using monta::election::Election;
using monta::election::Fence;
using monta::election::Role;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Mutex print_mu;

void Print(const std::string& line) {
  absl::MutexLock lock(&print_mu);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string Outcome(const absl::Status& s) {
  if (s.ok()) return "ok";
  return monta::election::IsNotLeader(s) ? "refused" : "error";
}

class Writer {
 public:
  Writer(monta::etcd::Client* client, Election* election, std::string prefix,
         std::string id)
      : client_(client),
        election_(election),
        prefix_(std::move(prefix)),
        id_(std::move(id)) {}

  // One tick: writes while leading, and for writes_after_loss ticks after.
  void Tick() {
    const std::optional<int64_t> epoch = election_->epoch();
    if (epoch.has_value()) {
      if (!fence_.has_value() || fence_->epoch != *epoch) {
        fence_ = Fence{election_->key(), *epoch};
      }
      ticks_after_loss_ = 0;
    } else if (!fence_.has_value() ||
               ++ticks_after_loss_ > absl::GetFlag(FLAGS_writes_after_loss)) {
      return;
    }
    ++seq_;
    const std::string base =
        absl::StrCat(prefix_, "/writes/", id_, "/", fence_->epoch, "/", seq_);
    Write("a", base + "a", [&](const monta::etcd::TxnRequest& txn) {
      return election_->FencedTxn(fence_->epoch, txn).status();
    });
    Write("b", base + "b", [&](const monta::etcd::TxnRequest& txn) {
      return monta::election::FencedTxn(*client_, *fence_, txn).status();
    });
  }

 private:
  template <typename Send>
  void Write(const std::string& kind, const std::string& key, Send send) {
    monta::etcd::TxnRequest txn;
    txn.success = {monta::etcd::Op::Put(key, id_)};
    const int64_t sent = NowNs();
    const absl::Status status = send(txn);
    Print(absl::StrCat(
        "WRITE ", kind, " ", key, " ", Outcome(status), " sent=", sent,
        " done=", NowNs(), " ep=", client_->preferred_endpoint(),
        status.ok() ? "" : " ", status.ok() ? "" : status.ToString()));
  }

  monta::etcd::Client* const client_;
  Election* const election_;
  const std::string prefix_;
  const std::string id_;
  std::optional<Fence> fence_;
  int ticks_after_loss_ = 0;
  int64_t seq_ = 0;
};

// Prints FOLLOWER on each change of who this follower follows.
void WatchRole(Election& election, const std::atomic<bool>& stop) {
  std::string printed;
  while (!stop.load()) {
    const monta::election::ElectionState s = election.state();
    const std::string now =
        s.role == Role::kFollowing ? s.leader_id : std::string();
    if (!now.empty() && now != printed) {
      Print(absl::StrCat("FOLLOWER leader=", now, " t=", NowNs()));
    }
    printed = now;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Dies with the test, even when the test is killed.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  monta::BlockTerminationSignals();
  absl::ParseCommandLine(argc, argv);
  const std::string id = absl::GetFlag(FLAGS_id);
  const std::string prefix = absl::GetFlag(FLAGS_prefix);

  monta::etcd::ClientOptions client_options;
  client_options.endpoints =
      absl::StrSplit(absl::GetFlag(FLAGS_endpoints), ',', absl::SkipEmpty());
  client_options.security.insecure = true;
  client_options.request_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_request_timeout_ms));
  auto client = monta::etcd::Client::Create(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 2;
  }

  monta::election::ElectionOptions options;
  options.prefix = prefix;
  options.replica_id = id;
  options.value = absl::StrCat("pid ", getpid());
  options.lease_ttl = absl::Seconds(absl::GetFlag(FLAGS_ttl_seconds));
  options.on_leading = [](int64_t epoch) {
    Print(absl::StrCat("LEADER ", epoch, " t=", NowNs()));
  };
  options.on_stopped_leading = [](int64_t epoch, const absl::Status& why) {
    Print(absl::StrCat("STOPPED ", epoch, " ",
                       absl::StatusCodeToString(why.code()), " t=", NowNs(),
                       " ", why.message()));
  };
  Print(absl::StrCat("CANDIDATE ", id, " t=", NowNs()));
  auto election = Election::Start(client->get(), options);
  if (!election.ok()) {
    std::fprintf(stderr, "%s\n", election.status().ToString().c_str());
    return 2;
  }

  std::atomic<bool> stop{false};
  std::thread role([&] { WatchRole(**election, stop); });
  std::thread writes([&] {
    const int interval_ms = absl::GetFlag(FLAGS_write_interval_ms);
    if (interval_ms <= 0) return;
    Writer writer(client->get(), election->get(), prefix, id);
    while (!stop.load()) {
      writer.Tick();
      absl::SleepFor(absl::Milliseconds(interval_ms));
    }
  });

  monta::WaitForTerminationSignal();
  // Hand over first: the writer's next ticks are refused (not leading).
  const int64_t start = NowNs();
  const absl::Status resigned = (*election)->Resign();
  const int64_t took_ms = (NowNs() - start) / 1000000;
  stop.store(true);
  writes.join();
  role.join();
  Print(absl::StrCat("RESIGNED ", absl::StatusCodeToString(resigned.code()),
                     " took_ms=", took_ms, " t=", NowNs()));
  return resigned.ok() ? 0 : 1;
}
