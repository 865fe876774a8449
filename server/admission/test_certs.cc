#include "server/admission/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace monta::admission {
namespace {

struct Deleter {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(FILE* f) const { std::fclose(f); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter>;
using Cert = std::unique_ptr<X509, Deleter>;

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Deleter> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, const_cast<char*>(value)));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

// A certificate for `key` with subject CN `common_name`, valid from an hour
// ago for a day, with a serial unique within the process (a verifier may
// reject two certificates of one issuer with one serial).
Cert NewCert(EVP_PKEY* key, const std::string& common_name) {
  static std::atomic<long> serial{1};
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  // Backdated an hour, as issuers do for clock skew: a peer whose wall clock
  // runs behind (tests step the planner's by -10 minutes) still accepts it.
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME_add_entry_by_txt(
      X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  return cert;
}

absl::StatusOr<TestCertFiles> Write(const std::string& dir,
                                    const std::string& name, X509* cert,
                                    EVP_PKEY* key) {
  TestCertFiles files{absl::StrCat(dir, "/", name, ".crt"),
                      absl::StrCat(dir, "/", name, ".key")};
  std::unique_ptr<FILE, Deleter> crt(std::fopen(files.cert_file.c_str(), "w"));
  std::unique_ptr<FILE, Deleter> pem(std::fopen(files.key_file.c_str(), "w"));
  if (crt == nullptr || pem == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write certificate files in ", dir));
  }
  if (PEM_write_X509(crt.get(), cert) != 1 ||
      PEM_write_PrivateKey(pem.get(), key, nullptr, nullptr, 0, nullptr,
                           nullptr) != 1) {
    return absl::InternalError("PEM write failed");
  }
  return files;
}

absl::StatusOr<std::pair<Cert, Key>> ReadCa(const TestCertFiles& ca) {
  std::unique_ptr<FILE, Deleter> crt(std::fopen(ca.cert_file.c_str(), "r"));
  std::unique_ptr<FILE, Deleter> pem(std::fopen(ca.key_file.c_str(), "r"));
  if (crt == nullptr || pem == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot read CA files ", ca.cert_file));
  }
  Cert cert(PEM_read_X509(crt.get(), nullptr, nullptr, nullptr));
  Key key(PEM_read_PrivateKey(pem.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr || key == nullptr) {
    return absl::InternalError(
        absl::StrCat("CA ", ca.cert_file, " unreadable"));
  }
  return std::make_pair(std::move(cert), std::move(key));
}

}  // namespace

absl::StatusOr<TestCertFiles> WriteSelfSignedCert(const std::string& dir,
                                                  const std::string& name) {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("EC key generation failed");
  Cert cert = NewCert(key.get(), "localhost");
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  if (!AddExtension(cert.get(), cert.get(), NID_subject_alt_name,
                    "DNS:localhost,IP:127.0.0.1") ||
      !AddExtension(cert.get(), cert.get(), NID_basic_constraints,
                    "critical,CA:TRUE") ||
      !AddExtension(cert.get(), cert.get(), NID_key_usage,
                    "critical,digitalSignature,keyCertSign")) {
    return absl::InternalError("certificate extensions failed");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("certificate signing failed");
  }
  return Write(dir, name, cert.get(), key.get());
}

absl::StatusOr<TestCertFiles> WriteTestCa(const std::string& dir,
                                          const std::string& name,
                                          const std::string& common_name) {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("EC key generation failed");
  Cert cert = NewCert(key.get(), common_name);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  if (!AddExtension(cert.get(), cert.get(), NID_basic_constraints,
                    "critical,CA:TRUE") ||
      !AddExtension(cert.get(), cert.get(), NID_key_usage,
                    "critical,keyCertSign,cRLSign") ||
      !AddExtension(cert.get(), cert.get(), NID_subject_key_identifier,
                    "hash")) {
    return absl::InternalError("CA extensions failed");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("CA signing failed");
  }
  return Write(dir, name, cert.get(), key.get());
}

absl::StatusOr<TestCertFiles> WriteTestLeafCert(const TestCertFiles& ca,
                                                const std::string& dir,
                                                const std::string& name,
                                                const std::string& san) {
  absl::StatusOr<std::pair<Cert, Key>> issuer = ReadCa(ca);
  if (!issuer.ok()) return issuer.status();
  X509* ca_cert = issuer->first.get();
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("EC key generation failed");
  Cert cert = NewCert(key.get(), name);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert));
  if ((!san.empty() &&
       !AddExtension(cert.get(), ca_cert, NID_subject_alt_name, san.c_str())) ||
      !AddExtension(cert.get(), ca_cert, NID_basic_constraints,
                    "critical,CA:FALSE") ||
      !AddExtension(cert.get(), ca_cert, NID_key_usage,
                    "critical,digitalSignature") ||
      !AddExtension(cert.get(), ca_cert, NID_ext_key_usage,
                    "serverAuth,clientAuth") ||
      !AddExtension(cert.get(), ca_cert, NID_authority_key_identifier,
                    "keyid:always")) {
    return absl::InternalError(
        absl::StrCat("certificate extensions failed (san \"", san, "\")"));
  }
  if (X509_sign(cert.get(), issuer->second.get(), EVP_sha256()) == 0) {
    return absl::InternalError("certificate signing failed");
  }
  return Write(dir, name, cert.get(), key.get());
}

}  // namespace monta::admission
