// Throwaway TLS certificates (ECDSA P-256) for tests and the load generators,
// made with OpenSSL's C API: a self-signed one for the webhook, and a small
// PKI (a CA and leaf certificates with chosen subjectAltNames) for the gRPC
// API's mutual TLS and its node / operator / reader identities.
#ifndef MONTA_SERVER_ADMISSION_TEST_CERTS_H_
#define MONTA_SERVER_ADMISSION_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace monta::admission {

struct TestCertFiles {
  std::string cert_file;  // PEM certificate (also the CA to trust)
  std::string key_file;   // PEM private key
};

// Writes `<dir>/<name>.crt` and `<dir>/<name>.key`, valid from an hour ago
// (clock skew) for a day.
absl::StatusOr<TestCertFiles> WriteSelfSignedCert(
    const std::string& dir, const std::string& name = "webhook");

// A self-signed CA (CA:TRUE, keyCertSign), `<dir>/<name>.crt` and `.key`,
// valid from an hour ago (clock skew) for a day. `common_name` tells CAs of one
// test apart.
absl::StatusOr<TestCertFiles> WriteTestCa(const std::string& dir,
                                          const std::string& name,
                                          const std::string& common_name);

// A leaf certificate signed by `ca` (from WriteTestCa), usable for TLS server
// and client authentication, with subjectAltName `san` in OpenSSL's syntax,
// e.g. "URI:spiffe://monta/node/node-a" or "DNS:localhost,IP:127.0.0.1";
// empty = none. Written to `<dir>/<name>.crt` and `.key`; valid for a day.
absl::StatusOr<TestCertFiles> WriteTestLeafCert(const TestCertFiles& ca,
                                                const std::string& dir,
                                                const std::string& name,
                                                const std::string& san);

}  // namespace monta::admission

#endif  // MONTA_SERVER_ADMISSION_TEST_CERTS_H_
