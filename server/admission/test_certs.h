// Throwaway self-signed TLS certificates (ECDSA P-256, SAN localhost and
// 127.0.0.1) for tests and the load generator, made with OpenSSL's C API.
#ifndef MONTA_SERVER_ADMISSION_TEST_CERTS_H_
#define MONTA_SERVER_ADMISSION_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace monta::admission {

struct TestCertFiles {
  std::string cert_file;  // PEM certificate (also the CA to trust)
  std::string key_file;   // PEM private key
};

// Writes `<dir>/<name>.crt` and `<dir>/<name>.key`, valid from now for a day.
absl::StatusOr<TestCertFiles> WriteSelfSignedCert(
    const std::string& dir, const std::string& name = "webhook");

}  // namespace monta::admission

#endif  // MONTA_SERVER_ADMISSION_TEST_CERTS_H_
