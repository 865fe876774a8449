#include "common/grpc_security.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace monta {
namespace {

struct Deleter {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};

absl::StatusOr<std::string> ReadFile(absl::string_view flag,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::unique_ptr<BIO, Deleter> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, Deleter>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM file, or an error naming the flag.
absl::StatusOr<std::unique_ptr<X509, Deleter>> ReadCertificate(
    absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(flag, path);
  if (!pem.ok()) return pem.status();
  auto bio = MemoryBio(*pem);
  std::unique_ptr<X509, Deleter> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, ": expected a PEM certificate (BEGIN CERTIFICATE)"));
  }
  return cert;
}

absl::Status ValidateTlsFiles(const GrpcSecurityOptions& options) {
  const std::string ca_flag = absl::StrCat(options.flag_prefix, "ca_file");
  const std::string cert_flag = absl::StrCat(options.flag_prefix, "cert_file");
  const std::string key_flag = absl::StrCat(options.flag_prefix, "key_file");
  absl::StatusOr<std::unique_ptr<X509, Deleter>> ca =
      ReadCertificate(ca_flag, options.ca_file);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::unique_ptr<X509, Deleter>> cert =
      ReadCertificate(cert_flag, options.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key_pem = ReadFile(key_flag, options.key_file);
  if (!key_pem.ok()) return key_pem.status();
  auto bio = MemoryBio(*key_pem);
  std::unique_ptr<EVP_PKEY, Deleter> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", options.key_file,
                     ": expected an unencrypted PEM private key"));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, " ", options.key_file, ": is not the private key of ",
        cert_flag, " ", options.cert_file));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(
    const GrpcSecurityOptions& options) {
  // Re-reads the files every refresh_seconds: a certificate rotated on disk
  // (cert-manager, a CSR flow) is used for new handshakes without a restart.
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.ca_file,
      static_cast<unsigned int>(options.refresh_seconds));
}

}  // namespace

absl::Status ValidateGrpcSecurity(const GrpcSecurityOptions& options) {
  const bool any_file = !options.ca_file.empty() ||
                        !options.cert_file.empty() || !options.key_file.empty();
  const std::string& p = options.flag_prefix;
  if (options.insecure) {
    if (any_file) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.insecure_flag, " excludes ", p, "ca_file, ", p,
          "cert_file and ", p, "key_file: choose plaintext or mutual TLS"));
    }
    return absl::OkStatus();
  }
  if (options.ca_file.empty() || options.cert_file.empty() ||
      options.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gRPC needs mutual TLS (", p, "ca_file, ", p, "cert_file and ", p,
        "key_file, all three) or, on a trusted network only, an explicit ",
        options.insecure_flag));
  }
  if (options.refresh_seconds < 1) {
    return absl::InvalidArgumentError("tls refresh_seconds must be >= 1");
  }
  return ValidateTlsFiles(options);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const GrpcSecurityOptions& options) {
  if (absl::Status valid = ValidateGrpcSecurity(options); !valid.ok()) {
    return valid;
  }
  if (options.insecure) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions tls(Provider(options));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_cert_request_type(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(tls);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const GrpcSecurityOptions& options) {
  if (absl::Status valid = ValidateGrpcSecurity(options); !valid.ok()) {
    return valid;
  }
  if (options.insecure) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(Provider(options));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_verify_server_certs(true);
  tls.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(tls);
}

absl::StatusOr<std::vector<std::string>> CertificateUris(
    absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::unique_ptr<X509, Deleter>> cert =
      ReadCertificate(flag, path);
  if (!cert.ok()) return cert.status();
  std::vector<std::string> uris;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                      ASN1_STRING_length(uri));
  }
  GENERAL_NAMES_free(names);
  return uris;
}

std::string DescribeGrpcSecurity(const GrpcSecurityOptions& options) {
  if (options.insecure) {
    return "WARNING: --insecure: gRPC is PLAINTEXT and UNAUTHENTICATED; "
           "anyone who reaches the port can act as any node. Use only on "
           "loopback or an isolated test network.";
  }
  return absl::StrCat("gRPC over mutual TLS (CA ", options.ca_file,
                      ", certificate ", options.cert_file, ", re-read every ",
                      options.refresh_seconds, " s)");
}

}  // namespace monta
