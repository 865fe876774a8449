// Who is calling, and may they: the gRPC API's authorization, in one place so
// each handler calls one function at its top.
//
// Identity comes from the client certificate of the mutual-TLS connection
// (the planner requires and verifies one against --tls_ca_file), from its URI
// subjectAltNames in the trust domain "monta":
//   spiffe://monta/node/<node name>      the agent of that node
//   spiffe://monta/operator/<name>       an operator (may run benchmarks)
//   anything else the CA signed          a reader
// A certificate naming more than one monta node/operator identity is refused.
//
// Rules: a node registers, heartbeats, deregisters and watches tasks only as
// itself; uses the rendezvous store only of tasks it is in; reports only in
// its own tasks, exactly its own ranks' times (the planner forms the curves).
// RunBenchmark (and other RPCs that start work) need an operator. Everything
// else is read-only and open to any authenticated caller. A caller on the deny
// list (--deny_list_file: its node name or its certificate's serial, see
// deny_list.h) is refused everything.
//
// Under --insecure there are no certificates and authorization is off: every
// call is allowed (the planner says so loudly at start).
#ifndef MONTA_SERVER_API_AUTHZ_H_
#define MONTA_SERVER_API_AUTHZ_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"
#include "proto/monta/v1/agent.pb.h"
#include "server/api/deny_list.h"
#include "server/bench/coordinator.h"
#include "server/metrics/planner_metrics.h"

namespace monta::api {

enum class PrincipalKind { kNode, kOperator, kReader };

struct Principal {
  PrincipalKind kind = PrincipalKind::kReader;
  // The node's or operator's name; for a reader, its certificate's first URI
  // or DNS name or common name (for messages only).
  std::string name;
};

// SPIFFE URIs of the two privileged kinds.
inline constexpr absl::string_view kNodeUriPrefix = "spiffe://monta/node/";
inline constexpr absl::string_view kOperatorUriPrefix =
    "spiffe://monta/operator/";

// The caller of an authenticated (TLS, verified client certificate)
// connection. UNAUTHENTICATED without a verified peer certificate,
// PERMISSION_DENIED when the certificate names several monta identities or an
// empty name.
absl::StatusOr<Principal> PrincipalFromAuthContext(
    const grpc::AuthContext& context);

// "node node-a", "operator alice", "reader ci.example.org".
std::string DescribePrincipal(const Principal& principal);

// The serial number of the peer's certificate (the x509_pem_cert property),
// in NormalizeSerial's form; "" without one.
std::string PeerCertificateSerial(const grpc::AuthContext& context);

class Authorizer {
 public:
  // `enforce` false (--insecure): every call is allowed. `coordinator` (not
  // owned, must outlive this) answers which nodes a task has. With
  // `deny_list` (may be null; not owned), a caller it names is refused every
  // call (PERMISSION_DENIED, counted in `metrics` when not null) from the
  // moment the list names it. `readable` (when set) says whether this replica
  // may answer read-only RPCs (RequireAuthenticated): a follower whose cache
  // is in sync may; without it only the leader may.
  Authorizer(bool enforce, const coordination::Coordinator* coordinator,
             const DenyList* deny_list = nullptr,
             metrics::PlannerMetrics* metrics = nullptr,
             std::function<absl::Status()> readable = nullptr);

  bool enforced() const { return enforce_; }

  // Every Require* below but RequireAuthenticated and
  // RequireNodeOnAnyReplica first asks the coordinator
  // whether this replica leads (Coordinator::CheckLeading): a follower
  // refuses them with UNAVAILABLE naming the leader, so clients move to it.
  // RequireAuthenticated (the read-only RPCs) and RequireNodeOnAnyReplica
  // (Heartbeat) ask `readable` instead: a follower answers reads from its
  // watch-fed cache (issue 20 item 6) and agents' heartbeats (item 4).

  // Register, Heartbeat, Deregister, WatchTasks: the caller is `node_name`.
  grpc::Status RequireNode(const grpc::ServerContextBase& context,
                           absl::string_view node_name) const;
  // Heartbeat: the caller is `node_name`, on any replica that is readable
  // (a leader, or a follower whose cache is in sync: it knows the node's
  // registration and owns its liveness, server/etcd_store/attachments.h).
  grpc::Status RequireNodeOnAnyReplica(const grpc::ServerContextBase& context,
                                       absl::string_view node_name) const;
  // RendezvousSet, RendezvousGet: the caller is a node of task `task_id`.
  grpc::Status RequireTaskMember(const grpc::ServerContextBase& context,
                                 const std::string& task_id) const;
  // ReportBenchmark: the caller is the reporting node, a node of the task,
  // and the report names exactly its ranks in the task.
  grpc::Status RequireReporter(
      const grpc::ServerContextBase& context,
      const monta::v1::ReportBenchmarkRequest& request) const;
  // RunBenchmark and other RPCs that make the cluster do work: an operator.
  grpc::Status RequireOperator(const grpc::ServerContextBase& context) const;
  // Read-only RPCs: any authenticated caller, on a replica that is readable.
  grpc::Status RequireAuthenticated(
      const grpc::ServerContextBase& context) const;

  // Who a call's rendezvous bytes count against (coordination::Coordinator::
  // Set): the caller's identity ("node node-a"), or under --insecure, where
  // there is none, its peer's address without the port ("peer
  // ipv4:10.213.1.1"): an emulated cluster's nodes still get a share each.
  // Call after a Require* succeeded.
  std::string Accountable(const grpc::ServerContextBase& context) const;

 private:
  // The caller, or why it may not call at all (no certificate, two
  // identities, denied).
  absl::StatusOr<Principal> Caller(
      const grpc::ServerContextBase& context) const;
  // PERMISSION_DENIED when the deny list names `caller` (or its certificate).
  absl::Status CheckDenied(const grpc::AuthContext& auth,
                           const Principal& caller) const;
  // OK while this replica leads (always without an election).
  grpc::Status Leading() const;
  // OK while this replica may answer reads (`readable`; Leading without it).
  grpc::Status Readable() const;
  // The caller is node `node_name` (always under --insecure).
  grpc::Status CheckCallerIsNode(const grpc::ServerContextBase& context,
                                 absl::string_view node_name) const;
  // The caller as node `node_name` (PERMISSION_DENIED otherwise).
  grpc::Status CheckNode(const Principal& caller,
                         absl::string_view node_name) const;

  const bool enforce_;
  const coordination::Coordinator* const coordinator_;
  const DenyList* const deny_list_;
  metrics::PlannerMetrics* const metrics_;
  const std::function<absl::Status()> readable_;
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_AUTHZ_H_
