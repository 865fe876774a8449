#include "server/api/authz.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/grpc_status.h"
#include "grpc/grpc_security_constants.h"
#include "openssl/bn.h"
#include "openssl/crypto.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "server/bench/curve_forming.h"

namespace monta::api {
namespace {

std::vector<std::string> Values(const grpc::AuthContext& context,
                                const char* property) {
  std::vector<std::string> out;
  for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
    out.emplace_back(value.data(), value.size());
  }
  return out;
}

grpc::Status Denied(const std::string& message) {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message);
}

// A name after a monta SPIFFE prefix: one path segment, as node names are.
bool ValidIdentityName(absl::string_view name) {
  return !name.empty() && name.size() <= 253 && !absl::StrContains(name, '/');
}

}  // namespace

absl::StatusOr<Principal> PrincipalFromAuthContext(
    const grpc::AuthContext& context) {
  if (!context.IsPeerAuthenticated()) {
    return absl::UnauthenticatedError(
        "no verified client certificate: the planner requires mutual TLS");
  }
  const std::vector<std::string> uris =
      Values(context, GRPC_PEER_URI_PROPERTY_NAME);
  std::vector<Principal> privileged;
  for (const std::string& uri : uris) {
    for (const auto& [prefix, kind] :
         {std::make_pair(kNodeUriPrefix, PrincipalKind::kNode),
          std::make_pair(kOperatorUriPrefix, PrincipalKind::kOperator)}) {
      if (!absl::StartsWith(uri, prefix)) continue;
      const std::string name = uri.substr(prefix.size());
      if (!ValidIdentityName(name)) {
        return absl::PermissionDeniedError(
            absl::StrCat("client certificate URI ", EchoInput(uri),
                         ": expected one non-empty name after ", prefix));
      }
      privileged.push_back(Principal{kind, name});
    }
  }
  if (privileged.size() > 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("client certificate names ", privileged.size(),
                     " monta identities (", absl::StrJoin(uris, ", "),
                     "); expected at most one spiffe://monta/node/ or "
                     "spiffe://monta/operator/ URI"));
  }
  if (privileged.size() == 1) return privileged.front();
  Principal reader;
  for (const char* property :
       {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
        GRPC_X509_CN_PROPERTY_NAME}) {
    std::vector<std::string> names = Values(context, property);
    if (!names.empty()) {
      reader.name = names.front();
      break;
    }
  }
  return reader;
}

std::string DescribePrincipal(const Principal& principal) {
  switch (principal.kind) {
    case PrincipalKind::kNode:
      return absl::StrCat("node ", principal.name);
    case PrincipalKind::kOperator:
      return absl::StrCat("operator ", principal.name);
    case PrincipalKind::kReader:
      break;
  }
  return absl::StrCat("reader ", principal.name);
}

std::string PeerCertificateSerial(const grpc::AuthContext& context) {
  const std::vector<std::string> pems =
      Values(context, GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) return "";
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pems.front().data(),
                      static_cast<int>(pems.front().size())),
      &BIO_free);
  if (bio == nullptr) return "";
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) return "";
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(
      ASN1_INTEGER_to_BN(X509_get_serialNumber(cert.get()), nullptr), &BN_free);
  if (serial == nullptr) return "";
  struct OpenSslFree {
    void operator()(char* p) const { OPENSSL_free(p); }
  };
  std::unique_ptr<char, OpenSslFree> hex(BN_bn2hex(serial.get()));
  return hex == nullptr ? "" : NormalizeSerial(hex.get());
}

Authorizer::Authorizer(bool enforce,
                       const coordination::Coordinator* coordinator,
                       const DenyList* deny_list,
                       metrics::PlannerMetrics* metrics,
                       std::function<absl::Status()> readable)
    : enforce_(enforce),
      coordinator_(coordinator),
      deny_list_(deny_list),
      metrics_(metrics),
      readable_(std::move(readable)) {}

absl::StatusOr<Principal> Authorizer::Caller(
    const grpc::ServerContextBase& context) const {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) {
    return absl::UnauthenticatedError("no authentication context");
  }
  absl::StatusOr<Principal> caller = PrincipalFromAuthContext(*auth);
  if (!caller.ok()) return caller;
  if (absl::Status denied = CheckDenied(*auth, *caller); !denied.ok()) {
    return denied;
  }
  return caller;
}

absl::Status Authorizer::CheckDenied(const grpc::AuthContext& auth,
                                     const Principal& caller) const {
  if (deny_list_ == nullptr) return absl::OkStatus();
  // Reading the certificate costs a PEM parse: only when a serial is listed.
  const std::string serial =
      deny_list_->has_serials() ? PeerCertificateSerial(auth) : "";
  const std::optional<std::string> entry = deny_list_->Match(
      caller.kind == PrincipalKind::kNode ? caller.name : "", serial);
  if (!entry.has_value()) return absl::OkStatus();
  if (metrics_ != nullptr) metrics_->RecordDeniedCall(*entry);
  return absl::PermissionDeniedError(
      absl::StrCat(DescribePrincipal(caller), " is denied: ", *entry,
                   " is on the planner's deny list (--deny_list_file)"));
}

grpc::Status Authorizer::CheckNode(const Principal& caller,
                                   absl::string_view node_name) const {
  if (caller.kind == PrincipalKind::kNode && caller.name == node_name) {
    return grpc::Status::OK;
  }
  return Denied(absl::StrCat(DescribePrincipal(caller), " may not act as node ",
                             EchoInput(node_name),
                             ": only the agent whose certificate names "
                             "spiffe://monta/node/<that name> may"));
}

grpc::Status Authorizer::Leading() const {
  return ToGrpc(coordinator_->CheckLeading());
}

grpc::Status Authorizer::RequireNode(const grpc::ServerContextBase& context,
                                     absl::string_view node_name) const {
  if (grpc::Status s = Leading(); !s.ok()) return s;
  return CheckCallerIsNode(context, node_name);
}

grpc::Status Authorizer::RequireNodeOnAnyReplica(
    const grpc::ServerContextBase& context, absl::string_view node_name) const {
  if (grpc::Status s = Readable(); !s.ok()) return s;
  return CheckCallerIsNode(context, node_name);
}

grpc::Status Authorizer::Readable() const {
  return readable_ ? ToGrpc(readable_()) : Leading();
}

grpc::Status Authorizer::CheckCallerIsNode(
    const grpc::ServerContextBase& context, absl::string_view node_name) const {
  if (!enforce_) return grpc::Status::OK;
  absl::StatusOr<Principal> caller = Caller(context);
  if (!caller.ok()) return ToGrpc(caller.status());
  return CheckNode(*caller, node_name);
}

grpc::Status Authorizer::RequireTaskMember(
    const grpc::ServerContextBase& context, const std::string& task_id) const {
  if (grpc::Status s = Leading(); !s.ok()) return s;
  if (!enforce_) return grpc::Status::OK;
  absl::StatusOr<Principal> caller = Caller(context);
  if (!caller.ok()) return ToGrpc(caller.status());
  absl::StatusOr<monta::v1::BenchmarkTask> task = coordinator_->Spec(task_id);
  if (!task.ok()) return ToGrpc(task.status());
  const auto& nodes = task->nodes();
  if (caller->kind != PrincipalKind::kNode ||
      std::find(nodes.begin(), nodes.end(), caller->name) == nodes.end()) {
    return Denied(absl::StrCat(DescribePrincipal(*caller),
                               " is not a node of task ", task_id));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::RequireReporter(
    const grpc::ServerContextBase& context,
    const monta::v1::ReportBenchmarkRequest& request) const {
  if (grpc::Status s = Leading(); !s.ok()) return s;
  if (!enforce_) return grpc::Status::OK;
  absl::StatusOr<Principal> caller = Caller(context);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (grpc::Status s = CheckNode(*caller, request.node_name()); !s.ok()) {
    return s;
  }
  absl::StatusOr<monta::v1::BenchmarkTask> task =
      coordinator_->Spec(request.task_id());
  if (!task.ok()) return ToGrpc(task.status());
  const auto& nodes = task->nodes();
  const auto at = std::find(nodes.begin(), nodes.end(), caller->name);
  if (at == nodes.end()) {
    return Denied(absl::StrCat(DescribePrincipal(*caller),
                               " is not a node of task ", request.task_id()));
  }
  // Its own ranks, all of them and nothing else: a node speaks only for
  // itself (the planner forms the curves from every node's report).
  const std::vector<int> own = coordination::RanksOf(*task, caller->name);
  if (!std::equal(own.begin(), own.end(), request.ranks().begin(),
                  request.ranks().end())) {
    return Denied(absl::StrCat(
        "ranks: ", DescribePrincipal(*caller), " may report exactly its own ",
        own.size(), " ranks [", own.empty() ? 0 : own.front(), ", ",
        own.empty() ? 0 : own.back() + 1, ") of task ", request.task_id(),
        ", got ", request.ranks_size(), " ranks"));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::RequireOperator(
    const grpc::ServerContextBase& context) const {
  if (grpc::Status s = Leading(); !s.ok()) return s;
  if (!enforce_) return grpc::Status::OK;
  absl::StatusOr<Principal> caller = Caller(context);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (caller->kind != PrincipalKind::kOperator) {
    return Denied(absl::StrCat(DescribePrincipal(*caller),
                               " may not start work on the cluster: only an "
                               "operator (certificate URI ",
                               kOperatorUriPrefix, "<name>) may"));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::RequireAuthenticated(
    const grpc::ServerContextBase& context) const {
  if (grpc::Status s = Readable(); !s.ok()) return s;
  if (!enforce_) return grpc::Status::OK;
  absl::StatusOr<Principal> caller = Caller(context);
  return caller.ok() ? grpc::Status::OK : ToGrpc(caller.status());
}

std::string Authorizer::Accountable(
    const grpc::ServerContextBase& context) const {
  if (enforce_) {
    absl::StatusOr<Principal> caller = Caller(context);
    if (caller.ok()) return DescribePrincipal(*caller);
  }
  // "ipv4:10.213.1.1:40522", "ipv6:[::1]:40522": the port changes per
  // connection, the host does not.
  std::string peer = context.peer();
  const size_t colon = peer.rfind(':');
  if ((absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) &&
      colon > 5) {
    peer.resize(colon);
  }
  return absl::StrCat("peer ", peer);
}

}  // namespace monta::api
