#include "common/grpc_security_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "gRPC mutual TLS: PEM bundle of the CA that signs Monta's "
          "certificates (the planner verifies clients against it, clients the "
          "planner); re-read every --tls_refresh_seconds");
ABSL_FLAG(std::string, tls_cert_file, "",
          "gRPC mutual TLS: PEM certificate chain of this process (an agent's "
          "names its node: URI SAN spiffe://monta/node/<node name>; an "
          "operator's spiffe://monta/operator/<name>)");
ABSL_FLAG(std::string, tls_key_file, "",
          "gRPC mutual TLS: PEM private key of --tls_cert_file");
ABSL_FLAG(int, tls_refresh_seconds, 60,
          "how often the three --tls_* files are re-read, so a rotated "
          "certificate is used without a restart");
ABSL_FLAG(bool, insecure, false,
          "plaintext, unauthenticated gRPC instead of mutual TLS: anyone who "
          "reaches the port is every node. Only for loopback or isolated "
          "test networks (the local demo, the emulated cluster)");

namespace monta {

absl::StatusOr<GrpcSecurityOptions> GrpcSecurityFromFlags() {
  GrpcSecurityOptions options;
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  options.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.refresh_seconds = absl::GetFlag(FLAGS_tls_refresh_seconds);
  if (options.refresh_seconds < 1) {
    return absl::InvalidArgumentError("--tls_refresh_seconds must be >= 1");
  }
  if (absl::Status valid = ValidateGrpcSecurity(options); !valid.ok()) {
    return valid;
  }
  return options;
}

}  // namespace monta
