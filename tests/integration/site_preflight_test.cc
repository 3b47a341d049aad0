// `fl client --preflight` (cli/preflight.h) against real `fl server` processes over loopback
// TLS: every check passes for a good site without registering it, and each kind of mistake
// fails its own check with a line that names it (later checks that need it SKIP).
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/common/provision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/site_test_util.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A client certificate signed by `ca` that expired yesterday (provisioning never makes one).
CertAndKey ExpiredClientCertificate(const CertAndKey& ca, const std::string& common_name) {
  auto read_cert = [](const std::string& pem) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    return x;
  };
  BIO* key_bio = BIO_new_mem_buf(ca.key_pem.data(), static_cast<int>(ca.key_pem.size()));
  EVP_PKEY* ca_key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  X509* ca_cert = read_cert(ca.cert_pem);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 4242);
  X509_gmtime_adj(X509_getm_notBefore(x), -2 * 86400);
  X509_gmtime_adj(X509_getm_notAfter(x), -86400);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, X509_get_subject_name(ca_cert));
  X509_set_pubkey(x, key);
  EXPECT_GT(X509_sign(x, ca_key, EVP_sha256()), 0);
  auto pem_of = [](auto write) {
    BIO* mem = BIO_new(BIO_s_mem());
    write(mem);
    char* data = nullptr;
    const long n = BIO_get_mem_data(mem, &data);
    std::string text(data, static_cast<size_t>(n));
    BIO_free(mem);
    return text;
  };
  CertAndKey out;
  out.cert_pem = pem_of([&](BIO* mem) { PEM_write_bio_X509(mem, x); });
  out.key_pem = pem_of(
      [&](BIO* mem) { PEM_write_bio_PrivateKey(mem, key, nullptr, nullptr, 0, nullptr, nullptr); });
  X509_free(x);
  X509_free(ca_cert);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
  return out;
}

// One federation (site-0 enrolled, site-1 not) with two servers that never start a round: one
// whose certificate is valid for 127.0.0.1, one whose certificate names only fl.example.org;
// and a second federation's CA and site.
class PreflightTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    pki_ = MakePki(dir_->path(), {"site-0", "site-1"});
    std::vector<std::string> flags = TinyRunFlags(1, 1);
    flags.insert(flags.end(), {"--min-clients", "5"});
    ProvisionedFiles enrolled = pki_;
    enrolled.client_certs = {pki_.client_certs[0]};
    port_ = FreeLoopbackPort();
    server_ = StartServer(ServerCommand(enrolled, dir_->path() + "/server", port_, flags),
                          dir_->path() + "/server.log");

    CertAndKey ca{*ReadFile(pki_.ca_cert), *ReadFile(pki_.ca_key)};
    absl::StatusOr<CertAndKey> other_host =
        MakeServerCertificate(ca, "fl server", {"fl.example.org"}, 30);
    ASSERT_TRUE(other_host.ok());
    ProvisionedFiles renamed = enrolled;
    renamed.server_cert = dir_->path() + "/other-host.pem";
    renamed.server_key = dir_->path() + "/other-host.key";
    ASSERT_TRUE(WriteFileAtomic(renamed.server_cert, other_host->cert_pem).ok());
    ASSERT_TRUE(WriteFileAtomic(renamed.server_key, other_host->key_pem).ok());
    other_host_port_ = FreeLoopbackPort();
    other_host_server_ =
        StartServer(ServerCommand(renamed, dir_->path() + "/server-2", other_host_port_, flags),
                    dir_->path() + "/server-2.log");

    ProvisionOptions other;
    other.out_dir = dir_->path() + "/other";
    other.federation_name = "other-federation";
    other.client_names = {"stranger"};
    absl::StatusOr<ProvisionedFiles> files = ProvisionFederation(other);
    ASSERT_TRUE(files.ok());
    other_ = *files;
  }
  static void TearDownTestSuite() {
    server_.reset();
    other_host_server_.reset();
    dir_.reset();
  }

  // `fl client --preflight` as site-0 of the first server; `overrides` (flag, value pairs) replace
  // those flags' values or add them.
  static FlResult Preflight(const std::vector<std::string>& overrides = {}) {
    std::vector<std::string> args = {"client",    "--preflight",
                                     "--server",  absl::StrCat("127.0.0.1:", port_),
                                     "--ca",      pki_.ca_cert,
                                     "--cert",    pki_.client_certs[0],
                                     "--key",     pki_.client_keys[0],
                                     "--csv",     WriteSiteCsv(dir_->path()),
                                     "--classes", "2"};
    for (size_t i = 0; i + 1 < overrides.size(); i += 2) {
      auto it = std::find(args.begin(), args.end(), overrides[i]);
      if (it != args.end()) {
        *(it + 1) = overrides[i + 1];
      } else {
        args.insert(args.end(), {overrides[i], overrides[i + 1]});
      }
    }
    return RunFl(args, dir_->path(), "preflight.log");
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline ProvisionedFiles pki_, other_;
  static inline int port_ = 0, other_host_port_ = 0;
  static inline std::unique_ptr<ChildProcess> server_, other_host_server_;
};

TEST_F(PreflightTest, EveryCheckPassesForAGoodSiteAndNothingIsRegistered) {
  FlResult r = Preflight();
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* check :
       {"configuration", "certificate and key", "certificate chain", "certificate validity",
        "server reachable", "TLS handshake", "enrollment", "data and model"}) {
    EXPECT_NE(LineStartingWith(r.out, absl::StrCat("PASS  ", check)), "") << check << "\n" << r.out;
  }
  EXPECT_THAT(LineStartingWith(r.out, "PASS  certificate validity"), HasSubstr("days left"));
  EXPECT_THAT(LineStartingWith(r.out, "PASS  enrollment"),
              HasSubstr("the server admits this site"));
  EXPECT_THAT(r.out, HasSubstr("preflight: 8 passed, 0 warned, 0 failed, 0 skipped"));
  // A dry run: the engine never heard of the site.
  EXPECT_THAT(ReadFile(dir_->path() + "/server.log").value_or(""), Not(HasSubstr("client_joined")));
}

TEST_F(PreflightTest, AKeyThatIsNotTheCertificatesFails) {
  FlResult r = Preflight({"--key", pki_.client_keys[1]});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  certificate and key"),
              HasSubstr(absl::StrCat(pki_.client_keys[1], " is not the private key of ",
                                     pki_.client_certs[0])));
  EXPECT_THAT(LineStartingWith(r.out, "SKIP  TLS handshake"), HasSubstr("needs the certificate"));
  EXPECT_NE(LineStartingWith(r.out, "SKIP  enrollment"), "") << r.out;
}

TEST_F(PreflightTest, ACertificateOfAnotherCaFailsTheChainAndTheEnrollment) {
  FlResult r = Preflight({"--cert", other_.client_certs[0], "--key", other_.client_keys[0]});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  certificate chain"),
              HasSubstr(absl::StrCat("does not chain to the CA in ", pki_.ca_cert)));
  EXPECT_THAT(
      LineStartingWith(r.out, "FAIL  enrollment"),
      HasSubstr("UNAUTHENTICATED: client certificate is not signed by this federation's CA"));
}

TEST_F(PreflightTest, AnExpiredCertificateFailsAndOneAboutToExpireWarns) {
  CertAndKey ca{*ReadFile(pki_.ca_cert), *ReadFile(pki_.ca_key)};
  CertAndKey expired = ExpiredClientCertificate(ca, "site-expired");
  ASSERT_TRUE(WriteFileAtomic(dir_->path() + "/expired.pem", expired.cert_pem).ok());
  ASSERT_TRUE(WriteFileAtomic(dir_->path() + "/expired.key", expired.key_pem).ok());
  FlResult r =
      Preflight({"--cert", dir_->path() + "/expired.pem", "--key", dir_->path() + "/expired.key"});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  certificate validity"), HasSubstr("expired on "));
  EXPECT_NE(LineStartingWith(r.out, "PASS  certificate chain"), "") << r.out;

  absl::StatusOr<CertAndKey> soon = MakeClientCertificate(ca, "site-soon", 10);
  ASSERT_TRUE(soon.ok());
  ASSERT_TRUE(WriteFileAtomic(dir_->path() + "/soon.pem", soon->cert_pem).ok());
  ASSERT_TRUE(WriteFileAtomic(dir_->path() + "/soon.key", soon->key_pem).ok());
  r = Preflight({"--cert", dir_->path() + "/soon.pem", "--key", dir_->path() + "/soon.key"});
  EXPECT_THAT(LineStartingWith(r.out, "WARN  certificate validity"), HasSubstr("days left"))
      << r.out;
}

TEST_F(PreflightTest, AServerThatIsDownFailsReachabilityAndSkipsWhatNeedsIt) {
  FlResult r = Preflight({"--server", absl::StrCat("127.0.0.1:", FreeLoopbackPort())});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  server reachable"), HasSubstr("Connection refused"));
  EXPECT_THAT(LineStartingWith(r.out, "SKIP  TLS handshake"), HasSubstr("needs the server"));
  EXPECT_THAT(LineStartingWith(r.out, "SKIP  enrollment"), HasSubstr("needs the TLS handshake"));
  EXPECT_NE(LineStartingWith(r.out, "PASS  data and model"), "") << r.out;
}

TEST_F(PreflightTest, TheWrongServerCaFailsTheHandshake) {
  FlResult r = Preflight({"--ca", other_.ca_cert});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  TLS handshake"),
              HasSubstr(absl::StrCat("does not verify against the CA in ", other_.ca_cert)));
}

TEST_F(PreflightTest, AServerCertificateForAnotherHostFailsTheHandshake) {
  FlResult r = Preflight({"--server", absl::StrCat("127.0.0.1:", other_host_port_)});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  TLS handshake"),
              HasSubstr("is valid for fl.example.org, not for '127.0.0.1'"));
}

TEST_F(PreflightTest, ASiteThatIsNotEnrolledFailsTheEnrollment) {
  FlResult r = Preflight({"--cert", pki_.client_certs[1], "--key", pki_.client_keys[1]});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  const std::string line = LineStartingWith(r.out, "FAIL  enrollment");
  EXPECT_THAT(line, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(line, HasSubstr("(CN=site-1) is not enrolled in this federation"));
  EXPECT_THAT(line, HasSubstr("fl admin --data-dir"));
}

TEST_F(PreflightTest, DataThatDoesNotFitTheModelFails) {
  FlResult r = Preflight({"--features", "30"});
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_THAT(LineStartingWith(r.out, "FAIL  data and model"),
              HasSubstr("site.csv has 2 feature columns but model softmax expects 30"));
}

// What an operator checks first on a host: which fl this is and which protocol it speaks.
TEST(FlCommandTest, VersionNamesTheBuildAndTheProtocol) {
  TempDir dir;
  FlResult r = RunFl({"--version"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out,
              ::testing::MatchesRegex("fl [0-9]+\\.[0-9]+\\.[0-9]+ \\(protocol fl\\.v1; .*\\)\n"));
}

}  // namespace
}  // namespace fl::testing
