#include "fl/common/crypto.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "fl/common/certificate_request.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free_all(b); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

X509Ptr ParseCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr ParseKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

std::string ToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(std::string_view()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, IncrementalMatchesOneShot) {
  std::string input;
  for (int i = 0; i < 100000; ++i) input.push_back(static_cast<char>(i * 31 + 7));
  Sha256 sha;
  // Uneven chunks, including an empty one and one through the byte-span overload.
  sha.Update(std::string_view(input).substr(0, 1));
  sha.Update(std::string_view(input).substr(1, 0));
  sha.Update(std::string_view(input).substr(1, 4095));
  std::string_view rest = std::string_view(input).substr(4096);
  sha.Update(std::as_bytes(std::span<const char>(rest.data(), 50000)));
  sha.Update(rest.substr(50000));
  EXPECT_EQ(sha.FinishHex(), Sha256Hex(input));
  EXPECT_EQ(Sha256Hex(std::as_bytes(std::span<const char>(input.data(), input.size()))),
            Sha256Hex(input));
}

class CryptoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ca = MakeCertificateAuthority("fl-ca", 30);
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *std::move(ca);
  }
  static void TearDownTestSuite() { ca_.reset(); }
  static const CertAndKey& ca() { return *ca_; }

 private:
  static inline std::optional<CertAndKey> ca_;
};

TEST_F(CryptoTest, GeneratesCaServerAndClientWithDistinctFingerprints) {
  auto server = MakeServerCertificate(ca(), "localhost", {"localhost", "127.0.0.1", "::1"}, 30);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = MakeClientCertificate(ca(), "site-a", 30);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT(ca().cert_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(client->key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));

  auto ca_fp = CertificateFingerprint(ca().cert_pem);
  auto server_fp = CertificateFingerprint(server->cert_pem);
  auto client_fp = CertificateFingerprint(client->cert_pem);
  ASSERT_TRUE(ca_fp.ok() && server_fp.ok() && client_fp.ok());
  EXPECT_THAT(*client_fp, MatchesRegex("[0-9a-f]{64}"));
  EXPECT_NE(*ca_fp, *server_fp);
  EXPECT_NE(*server_fp, *client_fp);
  EXPECT_NE(*ca_fp, *client_fp);
  EXPECT_EQ(*CertificateFingerprint(client->cert_pem), *client_fp);

  // Same name, new key and serial: a different identity.
  auto again = MakeClientCertificate(ca(), "site-a", 30);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*CertificateFingerprint(again->cert_pem), *client_fp);

  // The CA is a CA; the leaves are not, and they are signed by the CA's key.
  X509Ptr ca_cert = ParseCert(ca().cert_pem);
  X509Ptr client_cert = ParseCert(client->cert_pem);
  EXPECT_EQ(X509_check_ca(ca_cert.get()), 1);
  EXPECT_EQ(X509_check_ca(client_cert.get()), 0);
  EXPECT_EQ(X509_verify(client_cert.get(), X509_get0_pubkey(ca_cert.get())), 1);
  PkeyPtr client_key = ParseKey(client->key_pem);
  ASSERT_NE(client_key, nullptr);
  EXPECT_EQ(X509_check_private_key(client_cert.get(), client_key.get()), 1);
  EXPECT_EQ(EVP_PKEY_get_base_id(client_key.get()), EVP_PKEY_EC);
}

TEST_F(CryptoTest, CommonNameRoundTrip) {
  auto client = MakeClientCertificate(ca(), "hospital-7.example", 30);
  ASSERT_TRUE(client.ok()) << client.status();
  auto name = CertificateCommonName(client->cert_pem);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "hospital-7.example");
  EXPECT_EQ(*CertificateCommonName(ca().cert_pem), "fl-ca");
}

TEST_F(CryptoTest, ServerCertificateHasAltNames) {
  auto server = MakeServerCertificate(ca(), "fl-server", {"localhost", "127.0.0.1", "::1"}, 30);
  ASSERT_TRUE(server.ok()) << server.status();
  X509Ptr cert = ParseCert(server->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "10.0.0.1", 0), 0);
  EXPECT_EQ(X509_check_host(cert.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "evil.example", 0, 0, nullptr), 0);
  // An IP SAN is not also a DNS name, and the CN is not a host name once SANs exist.
  EXPECT_EQ(X509_check_host(cert.get(), "fl-server", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_SERVER, 0), 1);
  EXPECT_EQ(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_CLIENT, 0), 0);
}

TEST_F(CryptoTest, ClientFromFederationCaVerifies) {
  auto client = MakeClientCertificate(ca(), "site-a", 30);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(VerifyClientCertificate(client->cert_pem, ca().cert_pem).ok());
}

TEST_F(CryptoTest, ClientFromAnotherCaIsRefused) {
  // Same CA name as the federation's, so only the keys tell them apart.
  auto other_ca = MakeCertificateAuthority("fl-ca", 30);
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();
  auto intruder = MakeClientCertificate(*other_ca, "mallory", 30);
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  absl::Status status = VerifyClientCertificate(intruder->cert_pem, ca().cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("not signed by this federation's CA"));
  EXPECT_THAT(status.message(), HasSubstr("CN=mallory"));

  // A self-signed certificate is refused the same way.
  status = VerifyClientCertificate(other_ca->cert_pem, ca().cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("not signed by this federation's CA"));
}

TEST_F(CryptoTest, ExpiredClientIsRefused) {
  auto client = MakeClientCertificate(ca(), "site-old", 30);
  ASSERT_TRUE(client.ok()) << client.status();
  // Backdate the validity period and re-sign with the CA's key.
  X509Ptr cert = ParseCert(client->cert_pem);
  PkeyPtr ca_key = ParseKey(ca().key_pem);
  ASSERT_NE(X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3 * 24 * 3600), nullptr);
  ASSERT_NE(X509_gmtime_adj(X509_getm_notAfter(cert.get()), -24 * 3600), nullptr);
  ASSERT_GT(X509_sign(cert.get(), ca_key.get(), EVP_sha256()), 0);
  absl::Status status = VerifyClientCertificate(ToPem(cert.get()), ca().cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("client certificate has expired"));
  EXPECT_THAT(status.message(), HasSubstr("CN=site-old"));
}

TEST_F(CryptoTest, ServerCertificateIsNotAClientCertificate) {
  auto server = MakeServerCertificate(ca(), "localhost", {"localhost"}, 30);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status status = VerifyClientCertificate(server->cert_pem, ca().cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("client authentication"));
}

TEST_F(CryptoTest, GarbagePemIsInvalidArgument) {
  const std::string garbage =
      "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
  EXPECT_EQ(CertificateFingerprint(garbage).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CertificateFingerprint("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CertificateCommonName("hello").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyClientCertificate(garbage, ca().cert_pem).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyClientCertificate(ca().cert_pem, garbage).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeClientCertificate(CertAndKey{garbage, ca().key_pem}, "x", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CryptoTest, RejectsBadArguments) {
  EXPECT_EQ(MakeCertificateAuthority("", 30).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCertificateAuthority("ca", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeClientCertificate(ca(), std::string(65, 'x'), 30).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A CA whose key is not its own, and a leaf used as a CA.
  auto other_ca = MakeCertificateAuthority("other", 30);
  ASSERT_TRUE(other_ca.ok());
  absl::Status mismatch =
      MakeClientCertificate(CertAndKey{ca().cert_pem, other_ca->key_pem}, "x", 30).status();
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.message(), HasSubstr("does not match"));
  auto leaf = MakeClientCertificate(ca(), "leaf", 30);
  ASSERT_TRUE(leaf.ok());
  EXPECT_EQ(MakeClientCertificate(*leaf, "x", 30).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CryptoTest, IssuerMakesClientsTheFederationVerifies) {
  auto issuer = CertificateIssuer::Load(ca());
  ASSERT_TRUE(issuer.ok()) << issuer.status();
  auto a = issuer->IssueClient("site-a", 30);
  auto b = issuer->IssueClient("site-b", 30);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*CertificateFingerprint(a->cert_pem), *CertificateFingerprint(b->cert_pem));
  EXPECT_TRUE(VerifyClientCertificate(a->cert_pem, ca().cert_pem).ok());
  EXPECT_EQ(*CertificateCommonName(b->cert_pem), "site-b");
  // A server certificate from the same issuer names its hosts and is no client certificate.
  auto server = issuer->IssueServer("fl-server", {"127.0.0.1"}, 30);
  ASSERT_TRUE(server.ok()) << server.status();
  X509Ptr cert = ParseCert(server->cert_pem);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(VerifyClientCertificate(server->cert_pem, ca().cert_pem).code(),
            absl::StatusCode::kUnauthenticated);
  // The issuer refuses what the Make* functions refuse.
  EXPECT_EQ(issuer->IssueClient("", 30).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(issuer->IssueClient("x", 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto leaf = issuer->IssueClient("leaf", 30);
  ASSERT_TRUE(leaf.ok());
  absl::Status not_ca = CertificateIssuer::Load(*leaf).status();
  EXPECT_EQ(not_ca.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_ca.message(), HasSubstr("not a CA"));
}

TEST_F(CryptoTest, VerifierGivesTheIdentityAndRefusesAsVerifyClientCertificate) {
  auto verifier = ClientCertificateVerifier::Create(ca().cert_pem);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  auto client = MakeClientCertificate(ca(), "hospital-3", 30);
  ASSERT_TRUE(client.ok());
  auto identity = verifier->Verify(client->cert_pem);
  ASSERT_TRUE(identity.ok()) << identity.status();
  EXPECT_EQ(identity->fingerprint, *CertificateFingerprint(client->cert_pem));
  EXPECT_EQ(identity->common_name, "hospital-3");

  auto other_ca = MakeCertificateAuthority("fl-ca", 30);
  ASSERT_TRUE(other_ca.ok());
  auto intruder = MakeClientCertificate(*other_ca, "mallory", 30);
  ASSERT_TRUE(intruder.ok());
  absl::Status refused = verifier->Verify(intruder->cert_pem).status();
  EXPECT_EQ(refused, VerifyClientCertificate(intruder->cert_pem, ca().cert_pem));
  EXPECT_THAT(refused.message(), HasSubstr("not signed by this federation's CA"));
  EXPECT_EQ(verifier->Verify("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClientCertificateVerifier::Create("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// What a server checks of its own certificate before it listens.
TEST_F(CryptoTest, AServerCertificateMustBeAServersWithItsOwnKeyAndTheCa) {
  auto server = MakeServerCertificate(ca(), "fl-server", {"127.0.0.1"}, 30);
  auto other_server = MakeServerCertificate(ca(), "fl-server", {"127.0.0.1"}, 30);
  auto site = MakeClientCertificate(ca(), "site-0", 30);
  auto other_ca = MakeCertificateAuthority("fl-ca", 30);
  ASSERT_TRUE(server.ok() && other_server.ok() && site.ok() && other_ca.ok());
  EXPECT_TRUE(CheckServerCertificate(server->cert_pem, server->key_pem, ca().cert_pem).ok());

  absl::Status wrong_key =
      CheckServerCertificate(server->cert_pem, other_server->key_pem, ca().cert_pem);
  EXPECT_EQ(wrong_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_key.message(), HasSubstr("is not the key of the server certificate"));

  absl::Status a_site = CheckServerCertificate(site->cert_pem, site->key_pem, ca().cert_pem);
  EXPECT_EQ(a_site.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a_site.message(), HasSubstr("(CN=site-0) is not for TLS servers"));

  absl::Status wrong_ca =
      CheckServerCertificate(server->cert_pem, server->key_pem, other_ca->cert_pem);
  EXPECT_EQ(wrong_ca.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_ca.message(), HasSubstr("does not verify against the CA certificate"));
}

}  // namespace
}  // namespace fl

namespace fl {
namespace {

using ::testing::HasSubstr;

// A request a site could craft by hand, asking for more than its name: an admin role.
std::string RequestAskingForAdmin(const std::string& cn) {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  X509_REQ* req = X509_REQ_new();
  X509_NAME* subject = X509_REQ_get_subject_name(req);
  X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.data()),
                             static_cast<int>(cn.size()), -1, 0);
  X509_NAME_add_entry_by_NID(subject, NID_organizationalUnitName, MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("admin"), 5, -1, 0);
  X509_REQ_set_pubkey(req, key);
  X509_REQ_sign(req, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(bio, req);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_REQ_free(req);
  EVP_PKEY_free(key);
  return pem;
}

// fl certs request / sign: the site keeps its key; the certificate is for that key, a site's
// (whatever else the request asks for), and verifies against the federation's CA.
TEST(CertificateRequestTest, ASignedRequestIsASiteCertificateForTheSitesOwnKey) {
  auto ca = MakeCertificateAuthority("fl-ca", 30);
  ASSERT_TRUE(ca.ok());
  auto issuer = CertificateIssuer::Load(*ca);
  ASSERT_TRUE(issuer.ok());
  auto made = MakeCertificateRequest("hospital-z");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(made->request_pem, HasSubstr("BEGIN CERTIFICATE REQUEST"));
  EXPECT_THAT(made->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  auto signed_request = SignCertificateRequest(*issuer, made->request_pem, "", 30);
  ASSERT_TRUE(signed_request.ok()) << signed_request.status();
  EXPECT_EQ(signed_request->common_name, "hospital-z");
  // The certificate is for the key the site kept.
  BIO* cert_bio = BIO_new_mem_buf(signed_request->cert_pem.data(),
                                  static_cast<int>(signed_request->cert_pem.size()));
  BIO* key_bio = BIO_new_mem_buf(made->key_pem.data(), static_cast<int>(made->key_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  ASSERT_NE(cert, nullptr);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert, key), 1);
  X509_free(cert);
  EVP_PKEY_free(key);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  EXPECT_TRUE(VerifyClientCertificate(signed_request->cert_pem, ca->cert_pem).ok());
  auto verifier = ClientCertificateVerifier::Create(ca->cert_pem);
  ASSERT_TRUE(verifier.ok());
  EXPECT_FALSE(verifier->Verify(signed_request->cert_pem)->admin);
  EXPECT_EQ(*CertificateCommonName(signed_request->cert_pem), "hospital-z");

  auto renamed = SignCertificateRequest(*issuer, made->request_pem, "site-9", 30);
  ASSERT_TRUE(renamed.ok());
  EXPECT_EQ(*CertificateCommonName(renamed->cert_pem), "site-9");

  auto greedy = SignCertificateRequest(*issuer, RequestAskingForAdmin("mallory"), "", 30);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_FALSE(verifier->Verify(greedy->cert_pem)->admin) << "the role is the CA's to give";

  std::string tampered = made->request_pem;
  tampered[tampered.size() / 2] = tampered[tampered.size() / 2] == 'A' ? 'B' : 'A';
  auto bad = SignCertificateRequest(*issuer, tampered, "", 30);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SignCertificateRequest(*issuer, "garbage", "", 30).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fl
