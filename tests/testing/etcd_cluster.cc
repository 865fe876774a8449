#include "tests/testing/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace monta::testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr char kEtcdctl[] = "/usr/bin/etcdctl";
// util-linux (Essential in Debian): the member dies with the test process.
constexpr char kSetpriv[] = "/usr/bin/setpriv";
constexpr int kStartAttempts = 3;

std::string Url(bool tls, int port) {
  return absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", port);
}

}  // namespace

absl::Status EtcdCluster::Available() {
  for (const char* binary : {kEtcd, kEtcdctl, kSetpriv}) {
    if (access(binary, X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(binary,
                       " not found: install Debian's etcd-server, etcd-client "
                       "(scripts/setup.sh) and util-linux"));
    }
  }
  return absl::OkStatus();
}

EtcdCluster::EtcdCluster(Options options) : options_(std::move(options)) {
  static std::atomic<int> counter{0};
  dir_ = absl::StrCat(TempDir(), "/etcd-", getpid(), "-", counter++);
}

EtcdCluster::~EtcdCluster() {
  // SIGKILL ends paused (SIGSTOPped) members too.
  for (Member& m : members_) m.process = Process();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    Options options) {
  if (absl::Status s = Available(); !s.ok()) return s;
  if (options.members != 1 && options.members != 3) {
    return absl::InvalidArgumentError("EtcdCluster: 1 or 3 members");
  }
  if (!options.auto_compaction_retention.empty() &&
      options.auto_compaction_mode != "periodic" &&
      options.auto_compaction_mode != "revision") {
    return absl::InvalidArgumentError(absl::StrCat(
        "EtcdCluster: auto_compaction_mode \"", options.auto_compaction_mode,
        "\": expected periodic or revision"));
  }
  absl::Status last;
  // A free port may be taken by another process before etcd binds it: start
  // again on new ports.
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(std::move(options)));
    std::filesystem::create_directories(cluster->dir_);
    const int n = cluster->options_.members;
    for (int i = 0; i < n; ++i) {
      Member m;
      m.name = absl::StrCat("m", i);
      m.data_dir = absl::StrCat(cluster->dir_, "/", m.name, ".etcd");
      m.log_path = absl::StrCat(cluster->dir_, "/", m.name, ".log");
      cluster->members_.push_back(std::move(m));
    }
    // Ports of all members first, so that two members never pick one.
    for (Member& m : cluster->members_) m.client_port = FreeLoopbackPort();
    for (Member& m : cluster->members_) m.peer_port = FreeLoopbackPort();
    last = cluster->options_.restore_snapshot.empty()
               ? absl::OkStatus()
               : cluster->RestoreSnapshot();
    for (int i = 0; i < n && last.ok(); ++i) last = cluster->StartMember(i);
    if (last.ok()) {
      last = cluster->WaitHealthy(cluster->options_.start_timeout);
    }
    if (last.ok()) return cluster;
    options = std::move(cluster->options_);
    if (!absl::StrContains(last.message(), "address already in use")) break;
  }
  return last;
}

absl::Status EtcdCluster::RestoreSnapshot() {
  std::vector<std::string> peers;
  for (const Member& peer : members_) {
    peers.push_back(absl::StrCat(peer.name, "=", Url(false, peer.peer_port)));
  }
  for (const Member& m : members_) {
    const CommandResult r =
        Run({kEtcdctl, "snapshot", "restore", options_.restore_snapshot,
             absl::StrCat("--name=", m.name),
             absl::StrCat("--data-dir=", m.data_dir),
             absl::StrCat("--initial-cluster=", absl::StrJoin(peers, ",")),
             absl::StrCat("--initial-cluster-token=", dir_),
             absl::StrCat("--initial-advertise-peer-urls=",
                          Url(false, m.peer_port))},
            absl::Seconds(60));
    if (r.exit_code != 0) {
      return absl::InternalError(absl::StrCat("etcdctl snapshot restore into ",
                                              m.data_dir, ": ", r.out, r.err));
    }
  }
  return absl::OkStatus();
}

absl::Status EtcdCluster::SaveSnapshot(int i, const std::string& path) const {
  const CommandResult r = Etcdctl(
      {Url(options_.tls != nullptr, members_[i].client_port)},
      {"--command-timeout=30s", "snapshot", "save", path}, absl::Seconds(60));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("etcdctl snapshot save ", path, ": ", r.out, r.err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> EtcdCluster::Alarms() const {
  const CommandResult r =
      Etcdctl(RunningUrls(), {"--command-timeout=5s", "alarm", "list"},
              absl::Seconds(10));
  if (r.exit_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("etcdctl alarm list: ", r.out, r.err));
  }
  std::vector<std::string> alarms;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) alarms.emplace_back(line);
  }
  return alarms;
}

absl::Status EtcdCluster::Defragment(int i) const {
  const CommandResult r =
      Etcdctl({Url(options_.tls != nullptr, members_[i].client_port)},
              {"--command-timeout=60s", "defrag"}, absl::Seconds(90));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(
        "etcdctl defrag of member ", members_[i].name, ": ", r.out, r.err));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EtcdCluster::CountKeys(
    const std::string& prefix) const {
  // etcdctl 3.4 has no --count-only; a Range's count is every key of the
  // range, also past its limit.
  const CommandResult r =
      Etcdctl(RunningUrls(),
              {"--command-timeout=30s", "get", prefix, "--prefix",
               "--keys-only", "--limit=1", "-w", "json"},
              absl::Seconds(60));
  const nlohmann::json reply =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (r.exit_code != 0 || !reply.is_object()) {
    return absl::UnavailableError(
        absl::StrCat("etcdctl get --prefix ", prefix, ": ", r.out, r.err));
  }
  // etcd leaves "count" out when it is 0.
  return reply.value("count", int64_t{0});
}

absl::Status EtcdCluster::StartMember(int i) {
  Member& m = members_[i];
  const bool tls = options_.tls != nullptr;
  std::vector<std::string> peers;
  for (const Member& peer : members_) {
    peers.push_back(absl::StrCat(peer.name, "=", Url(false, peer.peer_port)));
  }
  std::vector<std::string> argv = {
      kSetpriv,
      "--pdeathsig",
      "KILL",
      kEtcd,
      absl::StrCat("--name=", m.name),
      absl::StrCat("--data-dir=", m.data_dir),
      absl::StrCat("--listen-client-urls=", Url(tls, m.client_port)),
      absl::StrCat("--advertise-client-urls=", Url(tls, m.client_port)),
      absl::StrCat("--listen-peer-urls=", Url(false, m.peer_port)),
      absl::StrCat("--initial-advertise-peer-urls=", Url(false, m.peer_port)),
      absl::StrCat("--initial-cluster=", absl::StrJoin(peers, ",")),
      "--initial-cluster-state=new",
      absl::StrCat("--initial-cluster-token=", dir_),
      absl::StrCat("--heartbeat-interval=", options_.heartbeat_ms),
      absl::StrCat("--election-timeout=", options_.election_ms),
      "--logger=zap",
      "--log-outputs=stderr",
      "--enable-pprof=false",
  };
  if (!options_.auto_compaction_retention.empty()) {
    argv.push_back(
        absl::StrCat("--auto-compaction-mode=", options_.auto_compaction_mode));
    argv.push_back(absl::StrCat("--auto-compaction-retention=",
                                options_.auto_compaction_retention));
  }
  if (options_.quota_backend_bytes > 0) {
    argv.push_back(
        absl::StrCat("--quota-backend-bytes=", options_.quota_backend_bytes));
  }
  if (tls) {
    argv.push_back(
        absl::StrCat("--cert-file=", options_.tls->server_cert_file));
    argv.push_back(absl::StrCat("--key-file=", options_.tls->server_key_file));
    argv.push_back(absl::StrCat("--trusted-ca-file=", options_.tls->ca_file));
    argv.push_back("--client-cert-auth");
  }
  absl::StatusOr<Process> process = Process::Start(argv, m.log_path);
  if (!process.ok()) return process.status();
  m.process = *std::move(process);
  return absl::OkStatus();
}

std::vector<std::string> EtcdCluster::EtcdctlFlags() const {
  std::vector<std::string> flags;
  if (options_.tls != nullptr) {
    flags.push_back(absl::StrCat("--cacert=", options_.tls->ca_file));
    flags.push_back(absl::StrCat("--cert=", options_.tls->client_cert_file));
    flags.push_back(absl::StrCat("--key=", options_.tls->client_key_file));
  }
  return flags;
}

std::vector<std::string> EtcdCluster::RunningUrls() const {
  std::vector<std::string> urls;
  for (const Member& m : members_) {
    if (m.process.running()) {
      urls.push_back(Url(options_.tls != nullptr, m.client_port));
    }
  }
  return urls;
}

CommandResult EtcdCluster::Etcdctl(const std::vector<std::string>& urls,
                                   const std::vector<std::string>& args,
                                   absl::Duration timeout) const {
  std::vector<std::string> argv = {
      kEtcdctl, absl::StrCat("--endpoints=", absl::StrJoin(urls, ","))};
  for (std::string& f : EtcdctlFlags()) argv.push_back(std::move(f));
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, timeout);
}

absl::Status EtcdCluster::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (true) {
    std::vector<std::string> running;
    for (int i = 0; i < size(); ++i) {
      Member& m = members_[i];
      if (!m.process.running()) continue;
      if (m.process.Wait(absl::ZeroDuration()).ok()) {  // it exited
        const std::string tail = LogTail(i);
        return absl::InternalError(
            absl::StrCat("etcd member ", m.name, " exited",
                         absl::StrContains(tail, "address already in use")
                             ? " (address already in use)"
                             : "",
                         "; its log ends:\n", tail));
      }
      running.push_back(Url(options_.tls != nullptr, m.client_port));
    }
    CommandResult r = Etcdctl(
        running,
        {"--command-timeout=2s", "--dial-timeout=1s", "endpoint", "health"},
        absl::Seconds(10));
    if (r.exit_code == 0) return absl::OkStatus();
    last = r.out + r.err;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("etcd cluster not healthy within ",
                       absl::FormatDuration(timeout), ": ", last));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::StatusOr<int> EtcdCluster::LeaderIndex() const {
  const CommandResult r = Etcdctl(RunningUrls(),
                                  {"--command-timeout=2s", "--dial-timeout=1s",
                                   "endpoint", "status", "-w", "json"},
                                  absl::Seconds(10));
  // etcdctl exits non-zero when a member does not answer, and still prints
  // the others.
  const nlohmann::json statuses =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (!statuses.is_array()) {
    return absl::UnavailableError(
        absl::StrCat("etcdctl endpoint status: ", r.out, r.err));
  }
  uint64_t leader = 0;
  std::vector<std::pair<uint64_t, std::string>> members;
  for (const nlohmann::json& s : statuses) {
    const uint64_t said = s["Status"].value("leader", uint64_t{0});
    if (said == 0 || (leader != 0 && said != leader)) {
      return absl::UnavailableError(
          "etcd members name no or different leaders");
    }
    leader = said;
    members.emplace_back(s["Status"]["header"].value("member_id", uint64_t{0}),
                         s.value("Endpoint", ""));
  }
  for (const auto& [id, url] : members) {
    if (id != leader) continue;
    for (int i = 0; i < size(); ++i) {
      if (absl::EndsWith(url, absl::StrCat(":", members_[i].client_port))) {
        return i;
      }
    }
  }
  return absl::UnavailableError(
      "etcd's leader is not among the running members");
}

std::string EtcdCluster::endpoint(int i) const {
  return absl::StrCat("127.0.0.1:", members_[i].client_port);
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return out;
}

int EtcdCluster::IndexOf(const std::string& endpoint) const {
  for (int i = 0; i < size(); ++i) {
    if (this->endpoint(i) == endpoint) return i;
  }
  return -1;
}

void EtcdCluster::Pause(int i) { members_[i].process.Signal(SIGSTOP); }

void EtcdCluster::Resume(int i) { members_[i].process.Signal(SIGCONT); }

void EtcdCluster::Kill(int i) { members_[i].process = Process(); }

absl::Status EtcdCluster::Restart(int i) {
  if (members_[i].process.running()) {
    return absl::FailedPreconditionError("EtcdCluster::Restart: still running");
  }
  if (absl::Status s = StartMember(i); !s.ok()) return s;
  return WaitHealthy(options_.start_timeout);
}

std::string EtcdCluster::LogTail(int i, size_t bytes) const {
  const std::string log = ReadFile(members_[i].log_path);
  return log.size() <= bytes ? log : log.substr(log.size() - bytes);
}

}  // namespace monta::testing
