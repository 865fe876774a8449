// The transport-security flags every Monta gRPC binary shares (--tls_ca_file,
// --tls_cert_file, --tls_key_file, --insecure). They are listed in each
// binary's --help (see common/flags.h).
#ifndef MONTA_COMMON_GRPC_SECURITY_FLAGS_H_
#define MONTA_COMMON_GRPC_SECURITY_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/grpc_security.h"

ABSL_DECLARE_FLAG(std::string, tls_ca_file);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::string, tls_key_file);
ABSL_DECLARE_FLAG(int, tls_refresh_seconds);
ABSL_DECLARE_FLAG(bool, insecure);

namespace monta {

// The options from the flags, validated (ValidateGrpcSecurity): errors name
// the flag and say why, e.g. neither TLS files nor --insecure given.
absl::StatusOr<GrpcSecurityOptions> GrpcSecurityFromFlags();

}  // namespace monta

#endif  // MONTA_COMMON_GRPC_SECURITY_FLAGS_H_
