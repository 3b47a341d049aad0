// fl::secagg's site identities (fl/aggregation/secagg/identity.h) on real OpenSSL and real
// certificates of a federation made here.
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/internal/openssl_ptr.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/common/crypto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::secagg {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kBrokenCertificate =
    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

Bytes ToBytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

CertAndKey MakeCa(std::string_view name) {
  absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority(name, 30);
  EXPECT_TRUE(ca.ok()) << ca.status();
  return *ca;
}

CertAndKey MakeSite(const CertAndKey& ca, std::string_view name) {
  absl::StatusOr<CertAndKey> site = MakeClientCertificate(ca, name, 30);
  EXPECT_TRUE(site.ok()) << site.status();
  return *site;
}

std::string PemOf(EVP_PKEY* key, bool private_key) {
  internal::BioPtr bio(BIO_new(BIO_s_mem()));
  const int written =
      private_key ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                  : PEM_write_bio_PUBKEY(bio.get(), key);
  EXPECT_EQ(written, 1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// A site certificate from `ca` for a fresh key of `type` ("ED25519", "RSA", ...), the way
// `fl certs sign` issues one for a key the site made.
CertAndKey MakeSiteWithKey(const CertAndKey& ca, std::string_view name, const char* type) {
  internal::EvpPkeyPtr key(std::string_view(type) == "RSA"
                               ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048})
                               : EVP_PKEY_Q_keygen(nullptr, nullptr, type));
  EXPECT_NE(key, nullptr);
  absl::StatusOr<CertificateIssuer> issuer = CertificateIssuer::Load(ca);
  EXPECT_TRUE(issuer.ok()) << issuer.status();
  absl::StatusOr<std::string> cert =
      issuer->IssueClientForKey(name, PemOf(key.get(), /*private_key=*/false), 30);
  EXPECT_TRUE(cert.ok()) << cert.status();
  return CertAndKey{*cert, PemOf(key.get(), /*private_key=*/true)};
}

// One federation for all the tests: making certificates is the slow part.
struct Federation {
  CertAndKey ca = MakeCa("federation-ca");
  CertAndKey site_a = MakeSite(ca, "site-a");
  CertAndKey site_b = MakeSite(ca, "site-b");
};

const Federation& TheFederation() {
  static const Federation federation;
  return federation;
}

class IdentityTest : public ::testing::Test {
 protected:
  static std::unique_ptr<IdentitySigner> Signer(const CertAndKey& site) {
    absl::StatusOr<std::unique_ptr<IdentitySigner>> signer =
        MakeX509Signer(site.cert_pem, site.key_pem);
    EXPECT_TRUE(signer.ok()) << signer.status();
    return *std::move(signer);
  }
  static std::unique_ptr<IdentityVerifier> Verifier(const std::string& ca_pem) {
    absl::StatusOr<std::unique_ptr<IdentityVerifier>> verifier = MakeX509Verifier(ca_pem);
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return *std::move(verifier);
  }

  const CertAndKey* const ca_ = &TheFederation().ca;
  const CertAndKey* const site_a_ = &TheFederation().site_a;
  const CertAndKey* const site_b_ = &TheFederation().site_b;
  const Bytes message_ = ToBytes("round 7: survivors 1 2 5 8");
};

TEST_F(IdentityTest, SignThenVerifyGivesTheCertificateFingerprint) {
  std::unique_ptr<IdentitySigner> signer = Signer(*site_a_);
  EXPECT_EQ(signer->identity(), site_a_->cert_pem);
  absl::StatusOr<Bytes> signature = signer->Sign(message_);
  ASSERT_TRUE(signature.ok()) << signature.status();

  absl::StatusOr<std::string> name =
      Verifier(ca_->cert_pem)->Verify(signer->identity(), message_, *signature);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, CertificateFingerprint(site_a_->cert_pem).value());
}

TEST_F(IdentityTest, EmptyMessageSignsAndVerifies) {
  std::unique_ptr<IdentitySigner> signer = Signer(*site_a_);
  absl::StatusOr<Bytes> signature = signer->Sign({});
  ASSERT_TRUE(signature.ok()) << signature.status();
  EXPECT_TRUE(Verifier(ca_->cert_pem)->Verify(signer->identity(), {}, *signature).ok());
}

TEST_F(IdentityTest, FlippedMessageByteIsUnauthenticated) {
  std::unique_ptr<IdentitySigner> signer = Signer(*site_a_);
  Bytes signature = signer->Sign(message_).value();
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  for (size_t i : {size_t{0}, message_.size() / 2, message_.size() - 1}) {
    Bytes tampered = message_;
    tampered[i] ^= 0x01;
    absl::StatusOr<std::string> name = verifier->Verify(signer->identity(), tampered, signature);
    EXPECT_EQ(name.status().code(), absl::StatusCode::kUnauthenticated) << i;
    EXPECT_THAT(std::string(name.status().message()), HasSubstr("signature by site-a")) << i;
    const std::string fingerprint = CertificateFingerprint(site_a_->cert_pem).value();
    EXPECT_THAT(std::string(name.status().message()), HasSubstr(fingerprint.substr(0, 16)));
  }
  // The cached certificate does not make a later good signature fail, nor a bad one pass.
  EXPECT_TRUE(verifier->Verify(signer->identity(), message_, signature).ok());
}

TEST_F(IdentityTest, FlippedSignatureByteIsUnauthenticated) {
  std::unique_ptr<IdentitySigner> signer = Signer(*site_a_);
  const Bytes signature = signer->Sign(message_).value();
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  for (size_t i = 0; i < signature.size(); i += 7) {
    Bytes tampered = signature;
    tampered[i] ^= 0x01;
    EXPECT_EQ(verifier->Verify(signer->identity(), message_, tampered).status().code(),
              absl::StatusCode::kUnauthenticated)
        << i;
  }
  Bytes truncated(signature.begin(), signature.end() - 1);
  EXPECT_EQ(verifier->Verify(signer->identity(), message_, truncated).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(verifier->Verify(signer->identity(), message_, {}).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// What a malicious server would try: a neighbour's certificate with its own site's signature.
TEST_F(IdentityTest, AnotherSitesSignatureIsUnauthenticated) {
  const Bytes by_b = Signer(*site_b_)->Sign(message_).value();
  absl::StatusOr<std::string> name =
      Verifier(ca_->cert_pem)->Verify(site_a_->cert_pem, message_, by_b);
  EXPECT_EQ(name.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("site-a"));
}

TEST_F(IdentityTest, CertificateOfAnotherCaIsPermissionDenied) {
  const CertAndKey other_ca = MakeCa("other-ca");
  const CertAndKey sybil = MakeSite(other_ca, "sybil-site");
  std::unique_ptr<IdentitySigner> signer = Signer(sybil);
  const Bytes signature = signer->Sign(message_).value();

  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  absl::StatusOr<std::string> name = verifier->Verify(signer->identity(), message_, signature);
  EXPECT_EQ(name.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("sybil-site"));
  EXPECT_THAT(std::string(name.status().message()),
              HasSubstr("unable to get local issuer certificate"));
  // Not cached: asked again, the answer is the same.
  EXPECT_EQ(verifier->Verify(signer->identity(), message_, signature).status().code(),
            absl::StatusCode::kPermissionDenied);
  // The other CA's verifier trusts it.
  EXPECT_TRUE(Verifier(other_ca.cert_pem)->Verify(signer->identity(), message_, signature).ok());
}

TEST_F(IdentityTest, ServerCertificateIsNotASiteIdentity) {
  absl::StatusOr<CertAndKey> server = MakeServerCertificate(*ca_, "fl-server", {}, 30);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<IdentitySigner> signer = Signer(*server);
  absl::StatusOr<std::string> name =
      Verifier(ca_->cert_pem)->Verify(signer->identity(), message_, signer->Sign(message_).value());
  EXPECT_EQ(name.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("fl-server"));
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("unsuitable certificate purpose"));
}

TEST_F(IdentityTest, CaPemWithSeveralCertificatesTrustsEach) {
  const CertAndKey other_ca = MakeCa("other-ca");
  const CertAndKey other_site = MakeSite(other_ca, "other-site");
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem + other_ca.cert_pem);
  for (const CertAndKey* site : {site_a_, &other_site}) {
    std::unique_ptr<IdentitySigner> signer = Signer(*site);
    absl::StatusOr<std::string> name =
        verifier->Verify(signer->identity(), message_, signer->Sign(message_).value());
    ASSERT_TRUE(name.ok()) << name.status();
    EXPECT_EQ(*name, CertificateFingerprint(site->cert_pem).value());
  }
}

TEST_F(IdentityTest, KeyOfAnotherCertificateIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<IdentitySigner>> signer =
      MakeX509Signer(site_a_->cert_pem, site_b_->key_pem);
  EXPECT_EQ(signer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(signer.status().message()), HasSubstr("not the key of its certificate"));
  EXPECT_THAT(std::string(signer.status().message()), HasSubstr("site-a"));
}

TEST_F(IdentityTest, SignerInputsThatDoNotParseAreInvalidArgument) {
  EXPECT_EQ(MakeX509Signer("not a certificate", site_a_->key_pem).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeX509Signer(site_a_->cert_pem, "not a key").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeX509Signer(site_a_->cert_pem, site_a_->cert_pem).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// identity() is the certificate alone, even when the file given holds the key as well.
TEST_F(IdentityTest, IdentityNeverCarriesTheKey) {
  absl::StatusOr<std::unique_ptr<IdentitySigner>> signer =
      MakeX509Signer(site_a_->cert_pem + site_a_->key_pem, site_a_->key_pem);
  ASSERT_TRUE(signer.ok()) << signer.status();
  EXPECT_EQ((*signer)->identity(), site_a_->cert_pem);
}

// Text around the PEM block is the same certificate (verified in full each time, not cached).
TEST_F(IdentityTest, OtherSpellingOfTheCertificateVerifies) {
  std::unique_ptr<IdentitySigner> signer = Signer(*site_a_);
  const Bytes signature = signer->Sign(message_).value();
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  const std::string fingerprint = CertificateFingerprint(site_a_->cert_pem).value();
  for (int i = 0; i < 2; ++i) {
    for (const std::string& identity :
         {"site-a\n" + site_a_->cert_pem, site_a_->cert_pem + "\n", site_a_->cert_pem}) {
      absl::StatusOr<std::string> name = verifier->Verify(identity, message_, signature);
      ASSERT_TRUE(name.ok()) << name.status();
      EXPECT_EQ(*name, fingerprint);
    }
  }
}

TEST_F(IdentityTest, GarbageIdentityIsInvalidArgument) {
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  const Bytes signature = Signer(*site_a_)->Sign(message_).value();
  for (std::string_view identity : {std::string_view(""), std::string_view("garbage"),
                                    kBrokenCertificate, std::string_view(site_a_->key_pem)}) {
    absl::StatusOr<std::string> name = verifier->Verify(identity, message_, signature);
    EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument) << identity;
    EXPECT_THAT(std::string(name.status().message()), HasSubstr("not a PEM certificate"));
  }
}

TEST_F(IdentityTest, CaPemWithoutCertificateIsInvalidArgument) {
  for (const std::string& ca_pem : {std::string(), std::string("garbage"), ca_->key_pem}) {
    absl::StatusOr<std::unique_ptr<IdentityVerifier>> verifier = MakeX509Verifier(ca_pem);
    EXPECT_EQ(verifier.status().code(), absl::StatusCode::kInvalidArgument) << ca_pem;
    EXPECT_THAT(std::string(verifier.status().message()), HasSubstr("no certificate"));
  }
  // A certificate followed by a broken one is refused, not half read.
  absl::StatusOr<std::unique_ptr<IdentityVerifier>> verifier =
      MakeX509Verifier(ca_->cert_pem + std::string(kBrokenCertificate));
  EXPECT_EQ(verifier.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(verifier.status().message()), HasSubstr("#2 does not parse"));
  // Blocks of other kinds are skipped.
  EXPECT_TRUE(MakeX509Verifier(ca_->cert_pem + ca_->key_pem).ok());
}

TEST_F(IdentityTest, OneVerifierFromFourThreadsAtOnce) {
  std::vector<std::unique_ptr<IdentitySigner>> signers;
  signers.push_back(Signer(*site_a_));
  signers.push_back(Signer(*site_b_));
  const std::vector<std::string> fingerprints = {CertificateFingerprint(site_a_->cert_pem).value(),
                                                 CertificateFingerprint(site_b_->cert_pem).value()};
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const size_t who = static_cast<size_t>((t + i) % 2);
        const Bytes message =
            ToBytes("thread " + std::to_string(t) + " message " + std::to_string(i));
        absl::StatusOr<Bytes> signature = signers[who]->Sign(message);
        if (!signature.ok()) {
          ++wrong;
          continue;
        }
        absl::StatusOr<std::string> good =
            verifier->Verify(signers[who]->identity(), message, *signature);
        if (!good.ok() || *good != fingerprints[who]) ++wrong;
        // The other site's certificate with this signature.
        absl::StatusOr<std::string> bad =
            verifier->Verify(signers[1 - who]->identity(), message, *signature);
        if (bad.status().code() != absl::StatusCode::kUnauthenticated) ++wrong;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Keys other than `fl certs`' P-256: the site made its own and the CA signed it.
class IdentityKeyTypeTest : public IdentityTest,
                            public ::testing::WithParamInterface<const char*> {};

TEST_P(IdentityKeyTypeTest, SignThenVerifyRoundTrips) {
  const CertAndKey site = MakeSiteWithKey(*ca_, "site-own-key", GetParam());
  std::unique_ptr<IdentitySigner> signer = Signer(site);
  const Bytes signature = signer->Sign(message_).value();
  std::unique_ptr<IdentityVerifier> verifier = Verifier(ca_->cert_pem);
  absl::StatusOr<std::string> name = verifier->Verify(signer->identity(), message_, signature);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, CertificateFingerprint(site.cert_pem).value());

  Bytes tampered = message_;
  tampered.back() ^= 0x80;
  EXPECT_EQ(verifier->Verify(signer->identity(), tampered, signature).status().code(),
            absl::StatusCode::kUnauthenticated);
}

INSTANTIATE_TEST_SUITE_P(KeyTypes, IdentityKeyTypeTest,
                         ::testing::Values("ED25519", "ED448", "RSA"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace fl::secagg
