// A real etcd cluster for tests: 1 or 3 members of Debian's /usr/bin/etcd as
// child processes on free loopback ports, each with its own data directory
// under the test's temporary directory, short heartbeat and election timeouts
// for speed. Start() returns once every member answers a linearizable read
// (etcdctl endpoint health); the destructor kills every member and removes
// the data, also when a test fails, and each member runs under
// `setpriv --pdeathsig KILL` so it dies with the test process even when that
// is killed.
#ifndef MONTA_TESTS_TESTING_ETCD_CLUSTER_H_
#define MONTA_TESTS_TESTING_ETCD_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process.h"

namespace monta::testing {

class EtcdCluster {
 public:
  struct Tls {
    // etcd's server certificate (naming IP 127.0.0.1) and key, and the CA
    // client certificates must be signed by (--client-cert-auth).
    std::string server_cert_file;
    std::string server_key_file;
    std::string ca_file;
    // A client certificate of that CA, for the health checks.
    std::string client_cert_file;
    std::string client_key_file;
  };
  struct Options {
    int members = 1;
    int heartbeat_ms = 100;
    int election_ms = 1000;
    // Mutual TLS on the client port when set; plaintext otherwise. Peers talk
    // plaintext on loopback.
    std::unique_ptr<Tls> tls;
    absl::Duration start_timeout = absl::Seconds(30);
    // An `etcdctl snapshot save` file: each member's data directory is
    // restored from it (`etcdctl snapshot restore` with this cluster's names
    // and peer URLs) before the members start, as deploy/README.md's restore.
    std::string restore_snapshot;
    // etcd's automatic compaction: --auto-compaction-mode ("periodic" or
    // "revision") and --auto-compaction-retention (periodic: a duration such
    // as "5m", compacted every that long; revision: a count); none when the
    // retention is empty (etcd's default).
    std::string auto_compaction_mode = "periodic";
    std::string auto_compaction_retention;
    // --quota-backend-bytes; 0: etcd's default (2 GiB). A member whose
    // database reaches it raises the NOSPACE alarm and refuses writes.
    int64_t quota_backend_bytes = 0;
  };

  // /usr/bin/etcd, or why it cannot run here.
  static absl::Status Available();

  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(Options options);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:port" of member i's client URL, and of all.
  std::string endpoint(int i) const;
  std::vector<std::string> endpoints() const;
  // The member whose client endpoint is `endpoint`, or -1.
  int IndexOf(const std::string& endpoint) const;

  // SIGSTOP / SIGCONT: the member keeps its sockets but answers nothing.
  void Pause(int i);
  void Resume(int i);
  // SIGKILL, reaped.
  void Kill(int i);
  // Starts a killed member again on its data directory and ports; waits
  // until the cluster is healthy.
  absl::Status Restart(int i);
  // Waits until every running member answers a linearizable read.
  absl::Status WaitHealthy(absl::Duration timeout);
  // The member that is etcd's raft leader now, as the running members say
  // (etcdctl endpoint status); UNAVAILABLE when they name none or disagree.
  absl::StatusOr<int> LeaderIndex() const;

  // `etcdctl snapshot save` of member i into `path`.
  absl::Status SaveSnapshot(int i, const std::string& path) const;

  // The alarms the running members raise (`etcdctl alarm list`), each as
  // etcdctl prints it ("memberID:<id> alarm:NOSPACE"); empty when none.
  absl::StatusOr<std::vector<std::string>> Alarms() const;
  // `etcdctl defrag` of member i: its database file shrinks to what is in
  // use (it answers nothing meanwhile).
  absl::Status Defragment(int i) const;
  // How many keys start with `prefix`.
  absl::StatusOr<int64_t> CountKeys(const std::string& prefix) const;

  // The last `bytes` of member i's log, for failure messages.
  std::string LogTail(int i, size_t bytes = 4000) const;

 private:
  struct Member {
    std::string name;
    std::string data_dir;
    std::string log_path;
    int client_port = 0;
    int peer_port = 0;
    Process process;
  };

  explicit EtcdCluster(Options options);
  absl::Status StartMember(int i);
  // etcdctl snapshot restore of options_.restore_snapshot into every
  // member's data directory.
  absl::Status RestoreSnapshot();
  std::vector<std::string> EtcdctlFlags() const;
  // The client URLs of the running members.
  std::vector<std::string> RunningUrls() const;
  // etcdctl on `urls` (with EtcdctlFlags), then `args`.
  CommandResult Etcdctl(const std::vector<std::string>& urls,
                        const std::vector<std::string>& args,
                        absl::Duration timeout) const;

  Options options_;
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_ETCD_CLUSTER_H_
