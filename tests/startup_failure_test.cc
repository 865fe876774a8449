// Start-up failures of the real binaries: each exits with a non-zero status
// (not a signal) and a last stderr line naming the problem; a planner whose
// database stops taking writes reports NOT_SERVING for monta.v1.Planner until
// a write succeeds again.
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "server/admission/test_certs.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

// The last line of `text` (a log), without the trailing newline.
std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

// Runs `binary` (a runfile) with `flags` (free ports unless a flag says
// otherwise) and asserts a clean refusal: exit status > 0, no signal, and a
// last stderr line
// "<binary's name>: ..." containing every one of `reason`. `wrapper` (a
// command that execs its arguments) runs the binary when not empty. Returns
// that line.
std::string ExpectRefused(const std::string& binary,
                          const std::vector<std::string>& flags,
                          const std::vector<std::string>& reason,
                          const std::vector<std::string>& wrapper = {}) {
  std::vector<std::string> argv = wrapper;
  argv.push_back(Runfile(binary));
  argv.insert(argv.end(), flags.begin(), flags.end());
  // Plaintext on loopback unless the test is about transport security, so
  // that the failure under test is the one reported.
  const bool chooses_security =
      std::any_of(flags.begin(), flags.end(), [](const std::string& flag) {
        for (const char* prefix : {"--insecure", "--tls_ca_file",
                                   "--tls_cert_file", "--tls_key_file"}) {
          if (absl::StartsWith(flag, prefix)) return true;
        }
        return false;
      });
  if (!chooses_security) argv.push_back("--insecure");
  const CommandResult result = Run(argv, absl::Seconds(60));
  // exit_code is -1 when a signal ended the process.
  EXPECT_GT(result.exit_code, 0) << result.err;
  const std::string line = LastLine(result.err);
  const std::string prefix =
      absl::StrCat(binary.substr(binary.rfind('/') + 1), ": ");
  EXPECT_TRUE(absl::StartsWith(line, prefix)) << line;
  for (const std::string& part : reason) {
    EXPECT_TRUE(absl::StrContains(line, part))
        << "want \"" << part << "\" in: " << line;
  }
  return line;
}

std::vector<std::string> PlannerFlags(const std::vector<std::string>& more) {
  std::vector<std::string> flags = {"--listen=127.0.0.1:0",
                                    "--metrics_listen=127.0.0.1:0",
                                    "--bench_on_register=false"};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// A loopback TCP listener the test holds (as another process would).
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), size) == 0 &&
        listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() { close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A planner database with its schema and about 1 MB of rows (store_meta, so
// that nothing needs to parse), written by the planner itself then filled.
std::string MakeDatabase(const std::string& name) {
  const std::string path = absl::StrCat(TempDir(), "/", name);
  absl::StatusOr<Process> planner =
      Process::Start({Runfile("server/monta-planner"), "--listen=127.0.0.1:0",
                      "--insecure", "--metrics_listen=", "--db=" + path},
                     path + ".log");
  EXPECT_TRUE(planner.ok());
  EXPECT_TRUE(WaitFor(
      [&] { return absl::StrContains(ReadFile(path + ".log"), "serving"); },
      absl::Seconds(30)))
      << ReadFile(path + ".log");
  planner->Signal(SIGTERM);
  EXPECT_TRUE(planner->Wait(absl::Seconds(30)).ok());
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string filler(4000, 'x');
  for (int i = 0; i < 250; ++i) {
    const std::string sql =
        absl::StrCat("INSERT INTO store_meta (key, value) VALUES ('filler", i,
                     "', '", filler, "');");
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  // Everything into the main file: the damage below must hit real pages.
  EXPECT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE);", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  return path;
}

// A /bin/sh -c script's start: makes directory $0 a read-only bind mount of
// itself (in the mount namespace the script runs in).
const std::string kReadOnlyMount =
    "mount --bind \"$0\" \"$0\" && "
    "mount -o remount,bind,ro \"$0\" \"$0\" && ";

TEST(StartupFailureTest, MetricsPortInUse) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  ExpectRefused(
      "server/monta-planner",
      {"--listen=127.0.0.1:0", "--metrics_listen=" + held.address()},
      {"metrics address " + held.address(), "Address already in use"});
  ExpectRefused("agent/monta-agent",
                {"--planner=127.0.0.1:1", "--metrics_listen=" + held.address()},
                {"--metrics_listen " + held.address()});
}

TEST(StartupFailureTest, GrpcPortInUseByAnotherPlanner) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--bench_on_register=false"}).ok());
  const std::string address = cluster.planner_address();
  // Without SO_REUSEPORT off, this one would start and take half the calls.
  ExpectRefused("server/monta-planner",
                {"--listen=" + address, "--metrics_listen=127.0.0.1:0"},
                {"grpc address " + address, "Address already in use"});
  const CommandResult health = cluster.Montactl({"health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");
}

// Neither mutual TLS nor an explicit --insecure: every gRPC binary refuses
// to start, naming the flags; a bad TLS file is named with what is wrong.
TEST(StartupFailureTest, TransportSecurityMustBeChosenAndUsable) {
  const std::vector<std::string> need = {"--tls_ca_file", "--tls_cert_file",
                                         "--tls_key_file", "--insecure"};
  ExpectRefused(
      "server/monta-planner",
      {"--listen=127.0.0.1:0", "--metrics_listen=", "--insecure=false"}, need);
  ExpectRefused("agent/monta-agent",
                {"--planner=127.0.0.1:1", "--insecure=false"}, need);
  ExpectRefused("client/montactl",
                {"--planner=127.0.0.1:1", "--insecure=false", "health"}, need);
  const std::string dir = TempDir();
  auto ca = admission::WriteTestCa(dir, "startup-ca", "startup-ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto other = admission::WriteTestLeafCert(*ca, dir, "startup-other", "");
  ASSERT_TRUE(other.ok()) << other.status();
  ExpectRefused("server/monta-planner",
                {"--listen=127.0.0.1:0", "--metrics_listen=", "--insecure",
                 "--tls_ca_file=" + ca->cert_file},
                {"--insecure excludes"});
  ExpectRefused(
      "server/monta-planner",
      {"--listen=127.0.0.1:0",
       "--metrics_listen=", "--tls_ca_file=" + dir + "/none.crt",
       "--tls_cert_file=" + ca->cert_file, "--tls_key_file=" + ca->key_file},
      {"--tls_ca_file " + dir + "/none.crt", "cannot read"});
  ExpectRefused(
      "agent/monta-agent",
      {"--planner=127.0.0.1:1", "--tls_ca_file=" + ca->cert_file,
       "--tls_cert_file=" + ca->cert_file, "--tls_key_file=" + other->key_file},
      {"--tls_key_file " + other->key_file, "is not the private key"});
  auto node_b = admission::WriteTestLeafCert(*ca, dir, "startup-node-b",
                                             "URI:spiffe://monta/node/node-b");
  ASSERT_TRUE(node_b.ok()) << node_b.status();
  ExpectRefused(
      "agent/monta-agent",
      {"--planner=127.0.0.1:1", "--node_name=node-a",
       "--tls_ca_file=" + ca->cert_file, "--tls_cert_file=" + node_b->cert_file,
       "--tls_key_file=" + node_b->key_file},
      {"does not name node \"node-a\"", "spiffe://monta/node/node-b"});
  ExpectRefused(
      "client/montactl",
      {"--tls_ca_file=" + ca->cert_file, "--tls_cert_file=" + ca->key_file,
       "--tls_key_file=" + ca->key_file, "health"},
      {"--tls_cert_file", "expected a PEM certificate"});
}

TEST(StartupFailureTest, GrpcPortHeldBySocket) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  ExpectRefused("server/monta-planner",
                {"--listen=" + held.address(), "--metrics_listen=127.0.0.1:0"},
                {"grpc address " + held.address(), "Address already in use"});
}

TEST(StartupFailureTest, PortFileDirectoryMissing) {
  const std::string missing = TempDir() + "/no-such-dir/ports.json";
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--port_file=" + missing}),
                {"--port_file", missing, "No such file or directory"});
  ExpectRefused("agent/monta-agent",
                {"--planner=127.0.0.1:1", "--metrics_listen=127.0.0.1:0",
                 "--port_file=" + missing},
                {"--port_file", missing, "No such file or directory"});
}

// A fabric map (or node labels file) that is missing or does not parse stops
// the planner with one line naming the flag, the file and, for a map, the
// line and field that are wrong.
TEST(StartupFailureTest, BadFabricFiles) {
  const std::string map = TempDir() + "/fabric-map.yaml";
  std::ofstream(map) << "version: 1\nracks:\n- name: r0\n  nodes: [a, b]\n"
                        "- name: r1\n  nodes: [b]\n";
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--fabric_map_file=" + map}),
                {"--fabric_map_file " + map,
                 "line 6: node b is listed twice "
                 "(also line 4)"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--fabric_map_file=" + map + ".missing"}),
                {"--fabric_map_file " + map + ".missing",
                 "cannot be read (No such file or directory)"});
  const std::string labels = TempDir() + "/nodes.json";
  std::ofstream(labels) << "{\"kind\": \"NodeList\", \"items\": 3}";
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--fabric_node_labels_file=" + labels}),
                {"--fabric_node_labels_file " + labels,
                 "items: expected a list of nodes"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--fabric_block_label_keys=zone a"}),
                {"--fabric_block_label_keys", "\"zone a\""});
}

// --store: an unknown store, etcd without endpoints or transport security,
// an etcd nobody answers at, and etcd with a --db, each refused with one line
// naming the flag.
TEST(StartupFailureTest, BadStoreFlags) {
  ExpectRefused("server/monta-planner", PlannerFlags({"--store=zookeeper"}),
                {"--store", "zookeeper"});
  ExpectRefused("server/monta-planner", PlannerFlags({"--store=etcd"}),
                {"--etcd_endpoints"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1"}),
                {"--etcd_"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1",
                              "--etcd_insecure"}),
                {"--store=etcd", "127.0.0.1:1"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1",
                              "--etcd_insecure", "--leader_lease_seconds=0.5"}),
                {"--leader_lease_seconds", "1..3600"});
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1",
                              "--etcd_insecure", "--replica_id=a/b"}),
                {"--replica_id"});
  ExpectRefused(
      "server/monta-planner",
      PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1",
                    "--etcd_insecure", "--follower_max_lag_seconds=0"}),
      {"--follower_max_lag_seconds", "0.5..3600"});
  // Everything lives in etcd: a --db beside it would hold nothing.
  ExpectRefused(
      "server/monta-planner",
      PlannerFlags({"--store=etcd", "--etcd_endpoints=127.0.0.1:1",
                    "--etcd_insecure", "--db=" + TempDir() + "/x.db"}),
      {"--db", "not used with --store=etcd", "--migrate_from_sqlite"});
}

TEST(StartupFailureTest, DatabaseDirectoryMissing) {
  const std::string dir = TempDir() + "/no-such-dir";
  ExpectRefused("server/monta-planner",
                PlannerFlags({"--db=" + dir + "/planner.db"}),
                {"--db " + dir + "/planner.db", "directory " + dir,
                 "No such file or directory"});
}

TEST(StartupFailureTest, DirectoryAsDatabase) {
  ExpectRefused("server/monta-planner", PlannerFlags({"--db=" + TempDir()}),
                {"--db " + TempDir(), "is a directory"});
}

TEST(StartupFailureTest, GarbageDatabase) {
  const std::string path = TempDir() + "/garbage.db";
  std::ofstream(path) << std::string(10000, 'g');
  ExpectRefused("server/monta-planner", PlannerFlags({"--db=" + path}),
                {"--db " + path, "not a SQLite database",
                 "file is not a database", "--db_reset_corrupt"});
}

TEST(StartupFailureTest, TruncatedDatabase) {
  const std::string path = MakeDatabase("truncated.db");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<off_t>(in.tellg());
  ASSERT_GT(size, 500'000);
  ASSERT_EQ(truncate(path.c_str(), size / 2), 0);
  ExpectRefused("server/monta-planner", PlannerFlags({"--db=" + path}),
                {"--db " + path, "corrupt", "--db_reset_corrupt"});
}

TEST(StartupFailureTest, OverwrittenPagesRefusedThenResetOnRequest) {
  const std::string path = MakeDatabase("overwritten.db");
  {
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(5 * 4096);
    file << std::string(3 * 4096, '\x5a');
  }
  ExpectRefused(
      "server/monta-planner", PlannerFlags({"--db=" + path}),
      {"--db " + path, "corrupt: PRAGMA quick_check", "--db_reset_corrupt"});
  // --db_reset_corrupt starts afresh and keeps the old file under a new name.
  LocalCluster cluster;
  ASSERT_TRUE(cluster
                  .StartPlanner({"--bench_on_register=false", "--db=" + path,
                                 "--db_reset_corrupt"})
                  .ok());
  const std::string log = ReadFile(cluster.planner().log_path());
  const size_t aside = log.find("moved it aside to " + path + ".corrupt-");
  ASSERT_NE(aside, std::string::npos) << log;
  const std::string moved =
      log.substr(aside + 18, log.find(' ', aside + 18) - aside - 18);
  EXPECT_GT(ReadFile(moved).size(), 500'000u) << moved;
  EXPECT_EQ(cluster.Montactl({"health", "monta.v1.Planner"}).out, "SERVING\n");
}

// Root writes through file permissions, so as root the database's directory
// is made read-only the way a read-only volume is: a read-only bind mount in a
// private mount namespace (unshare -m; works inside Bazel's user-namespace
// sandbox too). Other users get a mode 0444 file in a mode 0555 directory.
TEST(StartupFailureTest, ReadOnlyDatabase) {
  const std::string dir = TempDir() + "/read-only";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string made = MakeDatabase("read-only/planner.db");
  const std::string path = dir + "/planner.db";
  ASSERT_EQ(made, path);
  std::vector<std::string> wrapper;
  if (geteuid() == 0) {
    const CommandResult probe =
        testing::Run({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                      kReadOnlyMount + "true", dir});
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "no read-only bind mount here (unshare -m: exit "
                   << probe.exit_code << ": " << probe.err << ")";
    }
    wrapper = {"/usr/bin/unshare",
               "-m",
               "/bin/sh",
               "-c",
               kReadOnlyMount + "exec \"$@\"",
               dir};
  } else {
    ASSERT_EQ(chmod(path.c_str(), 0444), 0);
    ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  }
  ExpectRefused("server/monta-planner", PlannerFlags({"--db=" + path}),
                {"--db " + path, "read-only"}, wrapper);
  chmod(dir.c_str(), 0755);  // Bazel deletes the test's directory
}

// A database the planner may write, in a directory it may not (a read-only
// volume with the file mounted writable, or a mode 0555 directory): SQLite
// cannot create its journal and WAL files there. That is said, not "corrupt",
// and --db_reset_corrupt is neither suggested nor attempted. As root (who
// writes through modes) the directory is a read-only bind mount of itself in
// a private mount namespace with the real file bind-mounted writable over a
// placeholder; other users get a mode 0555 directory.
TEST(StartupFailureTest, WritableDatabaseInReadOnlyDirectory) {
  const std::string dir = TempDir() + "/read-only-dir";
  const std::string path = dir + "/planner.db";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  std::vector<std::string> wrapper;
  if (geteuid() == 0) {
    ASSERT_EQ(mkdir((TempDir() + "/writable").c_str(), 0755), 0);
    const std::string real = MakeDatabase("writable/planner.db");
    std::ofstream(path).flush();  // the mount point
    const std::string mounts =
        kReadOnlyMount + "mount --bind \"$1\" \"$0/planner.db\" && ";
    const CommandResult probe = testing::Run(
        {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
         mounts + "touch \"$0/planner.db\" && ! touch \"$0/probe\"", dir,
         real});
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "no read-only bind mount with a writable file here "
                      "(unshare -m: exit "
                   << probe.exit_code << ": " << probe.err << ")";
    }
    wrapper = {"/usr/bin/unshare",
               "-m",
               "/bin/sh",
               "-c",
               mounts + "shift 1; exec \"$@\"",
               dir,
               real};
  } else {
    ASSERT_EQ(MakeDatabase("read-only-dir/planner.db"), path);
    ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  }
  for (const bool reset : {false, true}) {
    std::vector<std::string> flags = PlannerFlags({"--db=" + path});
    if (reset) flags.push_back("--db_reset_corrupt");
    const std::string line =
        ExpectRefused("server/monta-planner", flags,
                      {"--db " + path, "directory " + dir + " is not writable",
                       "SQLite needs to create its journal and WAL files"},
                      wrapper);
    EXPECT_FALSE(absl::StrContains(line, "corrupt")) << line;
    EXPECT_FALSE(absl::StrContains(line, "--db_reset_corrupt")) << line;
  }
  chmod(dir.c_str(), 0755);  // Bazel deletes the test's directory
}

// Another process holds the database's write lock (as a stuck backup or a
// full disk would stop writes): the planner keeps answering from memory but
// says NOT_SERVING for monta.v1.Planner until a write succeeds again.
TEST(StoreFailureTest, FailedWritesMakePlannerNotServingUntilOneSucceeds) {
  LocalCluster cluster;
  const std::string path = cluster.dir() + "/planner.db";
  ASSERT_TRUE(
      cluster.StartPlanner({"--bench_on_register=false", "--db=" + path}).ok());
  EXPECT_EQ(cluster.Montactl({"health", "monta.v1.Planner"}).out, "SERVING\n");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());  // registers: a node write
  EXPECT_TRUE(cluster.WaitForPlannerHealth("NOT_SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
  EXPECT_TRUE(absl::StrContains(ReadFile(cluster.planner().log_path()),
                                "database is locked"));
  ASSERT_EQ(sqlite3_exec(db, "COMMIT;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());  // the next write succeeds
  EXPECT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
}

}  // namespace
}  // namespace monta::testing
