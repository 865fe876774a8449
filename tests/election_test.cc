// Leader election and fencing across processes (server/election), on real
// etcd members (tests/testing/etcd_cluster) and real candidate processes
// (//tests:election_candidate) that the test SIGKILLs, SIGSTOPs and SIGTERMs:
// one leader among three; a killed leader replaced once its lease runs out; a
// graceful stop handing over well under the TTL; a leader paused past its
// lease landing nothing after it resumes; etcd's own leader killed under a
// writing leader. Times are measured and printed; the bounds asserted are
// generous (the host is a loaded 2-core box).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/election/candidates.h"
#include "server/etcd/client.h"
#include "server/etcd/watch.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/etcd_suite.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(30);

// CLOCK_MONOTONIC, as the candidates print it.
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

using Fields = std::vector<std::string>;

// The value of "name=value" among a line's fields (0 when absent).
int64_t Field(const Fields& fields, absl::string_view name) {
  for (const std::string& f : fields) {
    int64_t v = 0;
    if (absl::StartsWith(f, absl::StrCat(name, "=")) &&
        absl::SimpleAtoi(f.substr(name.size() + 1), &v)) {
      return v;
    }
  }
  return 0;
}

// One //tests:election_candidate process and the lines it printed.
class Candidate {
 public:
  struct Options {
    std::vector<std::string> endpoints;
    std::string prefix;
    int ttl_seconds = 2;
    int write_interval_ms = 0;
  };

  static std::unique_ptr<Candidate> Start(const std::string& id,
                                          const Options& o) {
    auto c = std::unique_ptr<Candidate>(new Candidate());
    c->id_ = id;
    const std::string log =
        absl::StrCat(TempDir(), "/", o.prefix.substr(1), "-", id, ".log");
    auto process = Process::Start(
        {Runfile("tests/election_candidate"),
         absl::StrCat("--endpoints=", absl::StrJoin(o.endpoints, ",")),
         absl::StrCat("--prefix=", o.prefix), absl::StrCat("--id=", id),
         absl::StrCat("--ttl_seconds=", o.ttl_seconds),
         absl::StrCat("--write_interval_ms=", o.write_interval_ms)},
        log);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    c->process_ = *std::move(process);
    return c;
  }

  const std::string& id() const { return id_; }
  Process& process() { return process_; }

  // Complete lines, split into fields.
  std::vector<Fields> Lines() const {
    const std::string log = ReadFile(process_.log_path());
    std::vector<Fields> out;
    size_t start = 0;
    for (size_t end = log.find('\n'); end != std::string::npos;
         start = end + 1, end = log.find('\n', start)) {
      out.push_back(absl::StrSplit(log.substr(start, end - start), ' '));
    }
    return out;
  }
  // Lines of one kind from line `from` on.
  std::vector<Fields> Find(absl::string_view kind, size_t from = 0) const {
    std::vector<Fields> out;
    const std::vector<Fields> lines = Lines();
    for (size_t i = from; i < lines.size(); ++i) {
      if (!lines[i].empty() && lines[i][0] == kind) out.push_back(lines[i]);
    }
    return out;
  }
  // The epoch it leads with, by its LEADER / STOPPED lines.
  std::optional<int64_t> Leading() const {
    std::optional<int64_t> epoch;
    for (const Fields& f : Lines()) {
      int64_t e = 0;
      if (f.size() < 2 || !absl::SimpleAtoi(f[1], &e)) continue;
      if (f[0] == "LEADER") epoch = e;
      if (f[0] == "STOPPED" && epoch == e) epoch.reset();
    }
    return epoch;
  }
  bool Following() const { return !Find("FOLLOWER").empty(); }
  std::string Log() const { return ReadFile(process_.log_path()); }

 private:
  Candidate() = default;
  std::string id_;
  Process process_;
};

using Candidates = std::vector<std::unique_ptr<Candidate>>;

std::string Logs(const Candidates& all) {
  std::string out;
  for (const auto& c : all) {
    absl::StrAppend(&out, "--- ", c->id(), " ---\n", c->Log());
  }
  return out;
}

// Waits until exactly one of the live candidates leads and every other
// follows; its index, or -1.
int WaitForOneLeader(const Candidates& all, absl::Duration patience) {
  int leader = -1;
  WaitFor(
      [&] {
        leader = -1;
        int leaders = 0;
        bool others_follow = true;
        for (size_t i = 0; i < all.size(); ++i) {
          if (!all[i]->process().running()) continue;
          if (all[i]->Leading().has_value()) {
            ++leaders;
            leader = static_cast<int>(i);
          } else if (!all[i]->Following()) {
            others_follow = false;
          }
        }
        return leaders == 1 && others_follow;
      },
      patience);
  return leader;
}

// The first LEADER line of a candidate other than `except`, from each
// candidate's line `from[i]` on: (index, its fields), or (-1, {}).
std::pair<int, Fields> WaitForNewLeader(const Candidates& all, int except,
                                        const std::vector<size_t>& from) {
  std::pair<int, Fields> found{-1, {}};
  WaitFor(
      [&] {
        for (size_t i = 0; i < all.size(); ++i) {
          if (static_cast<int>(i) == except) continue;
          std::vector<Fields> led = all[i]->Find("LEADER", from[i]);
          if (!led.empty()) {
            found = {static_cast<int>(i), led.front()};
            return true;
          }
        }
        return false;
      },
      kPatience);
  return found;
}

std::vector<size_t> LineCounts(const Candidates& all) {
  std::vector<size_t> out;
  for (const auto& c : all) out.push_back(c->Lines().size());
  return out;
}

// Starts planner-0..2 and waits until one leads and the others follow.
void StartThree(const Candidate::Options& options, Candidates* all,
                int* leader) {
  for (const char* id : {"planner-0", "planner-1", "planner-2"}) {
    all->push_back(Candidate::Start(id, options));
    ASSERT_NE(all->back(), nullptr);
  }
  *leader = WaitForOneLeader(*all, kPatience);
  ASSERT_GE(*leader, 0) << Logs(*all);
}

class ElectionProcessTest : public EtcdSuite<3> {
 protected:
  Candidate::Options CandidateOptions(int ttl_seconds,
                                      int write_interval_ms) const {
    Candidate::Options o;
    o.endpoints = cluster_->endpoints();
    o.prefix = prefix_;
    o.ttl_seconds = ttl_seconds;
    o.write_interval_ms = write_interval_ms;
    return o;
  }
};

TEST_F(ElectionProcessTest, OneLeaderThenSigkillFailsOverAfterTheTtl) {
  constexpr int kTtlSeconds = 2;
  Candidates all;
  int first = -1;
  ASSERT_NO_FATAL_FAILURE(StartThree(
      CandidateOptions(kTtlSeconds, /*write_interval_ms=*/0), &all, &first));
  const int64_t epoch = *all[first]->Leading();
  // etcd names the same leader, to anyone who asks.
  auto leader = election::ReadLeader(*client_, prefix_);
  ASSERT_TRUE(leader.ok() && leader->has_value()) << leader.status();
  EXPECT_EQ((*leader)->replica_id, all[first]->id());
  EXPECT_EQ((*leader)->create_revision, epoch);

  const std::vector<size_t> from = LineCounts(all);
  const int64_t killed_ns = NowNs();
  all[first]->process().Signal(SIGKILL);
  ASSERT_TRUE(all[first]->process().Wait(kPatience).ok());
  auto [next, line] = WaitForNewLeader(all, first, from);
  ASSERT_GE(next, 0) << Logs(all);
  const double failover_s = Seconds(Field(line, "t") - killed_ns);
  std::cout << "leader SIGKILL -> new leader: " << failover_s << " s (TTL "
            << kTtlSeconds << " s)" << std::endl;
  int64_t next_epoch = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line[1], &next_epoch));
  EXPECT_GT(next_epoch, epoch);
  // Not before the lease could run out, and within it plus generous slack.
  EXPECT_GT(failover_s, 0.5);
  EXPECT_LT(failover_s, kTtlSeconds + 15);
  EXPECT_EQ(WaitForOneLeader(all, kPatience), next) << Logs(all);
}

TEST_F(ElectionProcessTest, GracefulStopHandsOverWellUnderTheTtl) {
  // A long TTL: a hand-over well under it cannot have waited for the lease.
  constexpr int kTtlSeconds = 10;
  Candidates all;
  int first = -1;
  ASSERT_NO_FATAL_FAILURE(StartThree(
      CandidateOptions(kTtlSeconds, /*write_interval_ms=*/0), &all, &first));
  const std::vector<size_t> from = LineCounts(all);
  const int64_t term_ns = NowNs();
  all[first]->process().Signal(SIGTERM);
  auto [next, line] = WaitForNewLeader(all, first, from);
  ASSERT_GE(next, 0) << Logs(all);
  const double handover_s = Seconds(Field(line, "t") - term_ns);
  auto exit_status = all[first]->process().Wait(kPatience);
  ASSERT_TRUE(exit_status.ok());
  EXPECT_EQ(*exit_status, 0) << all[first]->Log();
  const std::vector<Fields> resigned = all[first]->Find("RESIGNED");
  ASSERT_EQ(resigned.size(), 1u) << all[first]->Log();
  EXPECT_EQ(resigned[0][1], "OK");
  // It stopped leading before it handed over.
  ASSERT_FALSE(all[first]->Find("STOPPED").empty());
  EXPECT_LE(Field(all[first]->Find("STOPPED").back(), "t"), Field(line, "t"));
  std::cout << "SIGTERM (Resign) -> new leader: " << handover_s
            << " s (Resign itself " << Field(resigned[0], "took_ms")
            << " ms; TTL " << kTtlSeconds << " s)" << std::endl;
  EXPECT_LT(handover_s, kTtlSeconds / 2.0);
  EXPECT_EQ(WaitForOneLeader(all, kPatience), next) << Logs(all);
}

// Every key the candidate wrote under prefix/writes/<id>/.
std::vector<etcd::KeyValue> WritesOf(etcd::Client& client,
                                     const std::string& prefix,
                                     const std::string& id) {
  etcd::ListRequest request;
  request.key = absl::StrCat(prefix, "/writes/", id, "/");
  request.range_end = etcd::PrefixEnd(request.key);
  auto listed = client.List(request, 100000);
  EXPECT_TRUE(listed.ok()) << listed.status();
  return listed.ok() ? listed->kvs : std::vector<etcd::KeyValue>();
}

// The revision at which `key` was deleted, watching from `from`.
int64_t DeletedAt(etcd::Client& client, const std::string& key, int64_t from) {
  etcd::WatchOptions options;
  options.key = key;
  options.start_revision = from;
  auto watch = client.OpenWatch(options);
  EXPECT_TRUE(watch.ok()) << watch.status();
  if (!watch.ok()) return 0;
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), kPatience);
  while (std::chrono::steady_clock::now() < deadline) {
    auto batch = (*watch)->Next(absl::Seconds(1));
    if (!batch.ok()) continue;
    for (const etcd::Event& e : batch->events) {
      if (e.type == etcd::Event::Type::kDelete) return e.kv.mod_revision;
    }
  }
  return 0;
}

TEST_F(ElectionProcessTest, LeaderPausedPastItsLeaseLandsNothingAfter) {
  constexpr int kTtlSeconds = 2;
  Candidates all;
  int old = -1;
  ASSERT_NO_FATAL_FAILURE(StartThree(
      CandidateOptions(kTtlSeconds, /*write_interval_ms=*/100), &all, &old));
  Candidate& paused = *all[old];
  const int64_t epoch = *paused.Leading();
  // It writes while it leads (so the test is not vacuous).
  ASSERT_TRUE(WaitFor(
      [&] { return WritesOf(*client_, prefix_, paused.id()).size() >= 4; },
      kPatience))
      << paused.Log();

  const std::vector<size_t> from = LineCounts(all);
  const int64_t stopped_ns = NowNs();
  paused.process().Signal(SIGSTOP);
  auto [next, line] = WaitForNewLeader(all, old, from);
  if (next < 0) paused.process().Signal(SIGCONT);
  ASSERT_GE(next, 0) << Logs(all);
  std::cout << "leader SIGSTOP -> another leads: "
            << Seconds(Field(line, "t") - stopped_ns) << " s (TTL "
            << kTtlSeconds << " s)" << std::endl;
  absl::SleepFor(absl::Milliseconds(300));
  const size_t resumed_line = paused.Lines().size();
  const int64_t resumed_ns = NowNs();
  paused.process().Signal(SIGCONT);

  // It reports that it stopped leading, and tries its writes after loss.
  ASSERT_TRUE(WaitFor(
      [&] {
        return paused.Leading() != epoch &&
               paused.Find("WRITE", resumed_line).size() >= 6;
      },
      kPatience))
      << paused.Log();
  const std::vector<Fields> stopped = paused.Find("STOPPED", resumed_line);
  ASSERT_FALSE(stopped.empty()) << paused.Log();
  EXPECT_EQ(stopped[0][1], absl::StrCat(epoch));
  std::cout << "paused leader resumed -> STOPPED " << stopped[0][2] << " in "
            << Seconds(Field(stopped[0], "t") - resumed_ns) << " s"
            << std::endl;

  // Every write it sent after resuming was refused, the ones through the
  // captured fence by etcd's compare itself; none of their keys exists.
  int tried = 0, refused_by_etcd = 0, landed = 0;
  for (const Fields& w : paused.Find("WRITE", resumed_line)) {
    if (Field(w, "sent") < resumed_ns) continue;  // sent before the pause
    ++tried;
    EXPECT_EQ(w[3], "refused") << absl::StrJoin(w, " ");
    const std::string message = absl::StrJoin(w, " ");
    if (w[1] == "b" && (absl::StrContains(message, "key is gone") ||
                        absl::StrContains(message, "created again"))) {
      ++refused_by_etcd;
    }
    auto got = client_->Get(w[2]);
    ASSERT_TRUE(got.ok()) << got.status();
    landed += static_cast<int>(got->kvs.size());
  }
  std::cout << "paused leader after resuming: " << tried << " writes tried, "
            << refused_by_etcd << " refused by etcd's compare, " << landed
            << " landed" << std::endl;
  EXPECT_GE(tried, 2);
  EXPECT_GE(refused_by_etcd, 1);
  EXPECT_EQ(landed, 0);
  // By revision: everything it ever wrote landed before its key was deleted.
  const int64_t deleted =
      DeletedAt(*client_, election::CandidateKey(prefix_, paused.id()), epoch);
  ASSERT_GT(deleted, epoch);
  for (const etcd::KeyValue& kv : WritesOf(*client_, prefix_, paused.id())) {
    EXPECT_LT(kv.mod_revision, deleted) << kv.key;
  }
  // It campaigns again, behind the new leader.
  EXPECT_EQ(WaitForOneLeader(all, kPatience), next) << Logs(all);
}

// Prints every candidate's writes between `from_ns` and `to_ns` (sent and
// done, relative to `from_ns`).
void PrintWritesAcross(const Candidates& all, int64_t from_ns, int64_t to_ns) {
  for (const auto& c : all) {
    for (const Fields& w : c->Find("WRITE")) {
      if (Field(w, "done") < from_ns || Field(w, "sent") > to_ns) continue;
      std::cout << "  " << c->id() << " write " << w[1] << " sent +"
                << Seconds(Field(w, "sent") - from_ns) << " s, done +"
                << Seconds(Field(w, "done") - from_ns)
                << " s: " << absl::StrJoin(w.begin() + 3, w.begin() + 4, "")
                << " " << absl::StrJoin(w.begin() + 6, w.end(), " ")
                << std::endl;
    }
  }
}

// etcd's own leader is killed under a writing planner leader: the election
// survives (the planner leader keeps its lease, or loses it and a new one
// leads) and fenced writes resume within about one request timeout of the
// candidates' etcd client (2 s): a write in flight may wait out its deadline
// on a member whose leader died, and the next goes to a live member at once.
// Two orders of the endpoints: etcd's leader listed first (every candidate's
// client prefers the member that dies: the write in flight fails there, and
// the next must neither wait on the dead member's connection nor start there
// again) or last (the write in flight waits on a follower).
class ElectionEtcdFailoverTest : public ::testing::TestWithParam<bool> {};

TEST_P(ElectionEtcdFailoverTest, EtcdLeaderKilledWritesResume) {
  const bool leader_first = GetParam();
  constexpr int kTtlSeconds = 5;
  constexpr double kRequestTimeoutSeconds = 2;  // election_candidate's default
  EtcdCluster::Options options;
  options.members = 3;
  auto cluster = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto etcd_leader = (*cluster)->LeaderIndex();
  ASSERT_TRUE(etcd_leader.ok()) << etcd_leader.status();
  Candidate::Options o;
  o.endpoints = {(*cluster)->endpoint(*etcd_leader)};
  for (int i = 0; i < (*cluster)->size(); ++i) {
    if (i != *etcd_leader) o.endpoints.push_back((*cluster)->endpoint(i));
  }
  if (!leader_first)
    std::rotate(o.endpoints.begin(), o.endpoints.begin() + 1,
                o.endpoints.end());
  o.prefix = leader_first ? "/etcd-failover-first" : "/etcd-failover-last";
  o.ttl_seconds = kTtlSeconds;
  o.write_interval_ms = 100;
  Candidates all;
  int leader = -1;
  ASSERT_NO_FATAL_FAILURE(StartThree(o, &all, &leader));
  const int64_t epoch = *all[leader]->Leading();
  ASSERT_TRUE(WaitFor([&] { return all[leader]->Find("WRITE").size() >= 4; },
                      kPatience));
  // etcd keeps its leader while nothing disturbs it; checked again.
  auto still = (*cluster)->LeaderIndex();
  ASSERT_TRUE(still.ok()) << still.status();
  ASSERT_EQ(*still, *etcd_leader);
  const std::string preferred = all[leader]->Find("WRITE").back()[6];
  std::cout << "killing etcd's leader, member " << *etcd_leader << " at "
            << (*cluster)->endpoint(*etcd_leader) << " (listed "
            << (leader_first ? "first" : "last") << "; the planner leader's "
            << preferred << ")" << std::endl;
  const int64_t killed_ns = NowNs();
  (*cluster)->Kill(*etcd_leader);
  // The first fenced write sent after the kill that landed, by any leader.
  int64_t resumed_ns = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& c : all) {
          for (const Fields& w : c->Find("WRITE")) {
            if (w[3] == "ok" && Field(w, "sent") > killed_ns &&
                (resumed_ns == 0 || Field(w, "done") < resumed_ns)) {
              resumed_ns = Field(w, "done");
            }
          }
        }
        return resumed_ns != 0;
      },
      kPatience))
      << Logs(all);
  const int after = WaitForOneLeader(all, kPatience);
  ASSERT_GE(after, 0) << Logs(all);
  PrintWritesAcross(all, killed_ns, resumed_ns);
  const bool kept = after == leader && *all[after]->Leading() == epoch;
  const double resumed_seconds = Seconds(resumed_ns - killed_ns);
  std::cout << "etcd leader SIGKILL (listed "
            << (leader_first ? "first" : "last")
            << ") -> fenced writes resume: " << resumed_seconds
            << " s; the planner leader "
            << (kept ? "kept its epoch" : "changed") << " (TTL " << kTtlSeconds
            << " s, request timeout " << kRequestTimeoutSeconds << " s)"
            << std::endl;
  // About one request timeout (a write in flight waiting out its deadline;
  // measured 2.03-2.11 s): inside issue 20's 5 s bar with room for a loaded
  // host, and below the two timeouts (request + connect) the client once took.
  EXPECT_LT(resumed_seconds, kRequestTimeoutSeconds + 2.5) << Logs(all);
}

INSTANTIATE_TEST_SUITE_P(EndpointOrder, ElectionEtcdFailoverTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param
                                      ? std::string("EtcdLeaderListedFirst")
                                      : std::string("EtcdLeaderListedLast");
                         });

}  // namespace
}  // namespace monta::testing
