// Transport security of Monta's gRPC connections: mutual TLS with
// certificates re-read from disk (rotation without a restart), or plaintext
// only when asked for explicitly (--insecure). The planner, the agent,
// montactl and the load generators build their credentials here.
#ifndef MONTA_COMMON_GRPC_SECURITY_H_
#define MONTA_COMMON_GRPC_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace monta {

struct GrpcSecurityOptions {
  // Plaintext, no peer authentication (the local demo and the emulated
  // cluster on loopback or inside their own namespaces). Exclusive with the
  // files below.
  bool insecure = false;
  // PEM bundle of the CA(s) that sign peers' certificates: the planner
  // verifies client certificates against it, clients the planner's.
  std::string ca_file;
  // PEM certificate chain and private key of this process.
  std::string cert_file;
  std::string key_file;
  // How often gRPC re-reads the three files; a rotated certificate is used
  // for new connections after at most this long.
  int refresh_seconds = 60;
  // The flags errors name: "<flag_prefix>ca_file", "<flag_prefix>cert_file",
  // "<flag_prefix>key_file" and `insecure_flag`. The planner's own gRPC
  // uses --tls_*; its client to etcd (server/etcd) names --etcd_tls_*.
  std::string flag_prefix = "--tls_";
  std::string insecure_flag = "--insecure";
};

// OK when `options` is usable: either insecure, or all three files given,
// readable, PEM, and the key matching the certificate. Errors name the flag
// (--tls_ca_file, --tls_cert_file, --tls_key_file, --insecure) and say why.
absl::Status ValidateGrpcSecurity(const GrpcSecurityOptions& options);

// Server credentials: TLS that requires and verifies a client certificate
// signed by ca_file, or insecure ones. Validates first.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const GrpcSecurityOptions& options);

// Channel credentials: TLS presenting cert_file, verifying the server's
// certificate against ca_file and its name against the target's host (the
// planner's certificate must name the DNS name or IP clients dial), or
// insecure ones. Validates first.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const GrpcSecurityOptions& options);

// The URI subjectAltNames of the first certificate in the PEM file `path`
// (e.g. "spiffe://monta/node/node-a"); errors name `flag`.
absl::StatusOr<std::vector<std::string>> CertificateUris(
    absl::string_view flag, const std::string& path);

// One line for a process's log: what its gRPC connections are protected
// with, e.g. "mTLS (CA /etc/monta/tls/ca.crt, certificate ...)", or a loud
// warning under --insecure.
std::string DescribeGrpcSecurity(const GrpcSecurityOptions& options);

}  // namespace monta

#endif  // MONTA_COMMON_GRPC_SECURITY_H_
