#include "server/admission/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

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

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Deleter> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, const_cast<char*>(value)));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

}  // namespace

absl::StatusOr<TestCertFiles> WriteSelfSignedCert(const std::string& dir,
                                                  const std::string& name) {
  std::unique_ptr<EVP_PKEY, Deleter> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("EC key generation failed");
  std::unique_ptr<X509, Deleter> cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(
      subject, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  if (!AddExtension(cert.get(), NID_subject_alt_name,
                    "DNS:localhost,IP:127.0.0.1") ||
      !AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(cert.get(), NID_key_usage,
                    "critical,digitalSignature,keyCertSign")) {
    return absl::InternalError("certificate extensions failed");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("certificate signing failed");
  }
  TestCertFiles files{absl::StrCat(dir, "/", name, ".crt"),
                      absl::StrCat(dir, "/", name, ".key")};
  std::unique_ptr<FILE, Deleter> crt(std::fopen(files.cert_file.c_str(), "w"));
  std::unique_ptr<FILE, Deleter> pem(std::fopen(files.key_file.c_str(), "w"));
  if (crt == nullptr || pem == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write certificate files in ", dir));
  }
  if (PEM_write_X509(crt.get(), cert.get()) != 1 ||
      PEM_write_PrivateKey(pem.get(), key.get(), nullptr, nullptr, 0, nullptr,
                           nullptr) != 1) {
    return absl::InternalError("PEM write failed");
  }
  return files;
}

}  // namespace monta::admission
