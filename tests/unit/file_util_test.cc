#include "fl/common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"
#include "fl/common/provision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl {
namespace {

using ::testing::HasSubstr;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fl_file_util_test_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(std::string_view name) const { return (dir_ / name).string(); }

  static int Mode(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return -1;
    return static_cast<int>(st.st_mode & 07777);
  }

  std::filesystem::path dir_;
};

TEST_F(FileUtilTest, PositionalWritesAndReadsAreWholeOrNameWhyNot) {
  const std::string path = Path("staged");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  const std::string first = "abcd", second = "wxyz";
  EXPECT_EQ(PwriteAll(fd, std::as_bytes(std::span(second)), 4), 0);  // out of order
  EXPECT_EQ(PwriteAll(fd, std::as_bytes(std::span(first)), 0), 0);
  std::string back(8, '?');
  EXPECT_EQ(PreadAll(fd, std::as_writable_bytes(std::span(back)), 0), 0);
  EXPECT_EQ(back, "abcdwxyz");
  std::string past(4, '?');
  EXPECT_EQ(PreadAll(fd, std::as_writable_bytes(std::span(past)), 6), -1);  // the file ends
  ::close(fd);
  EXPECT_EQ(PwriteAll(fd, std::as_bytes(std::span(first)), 0), EBADF);
  EXPECT_EQ(PreadAll(fd, std::as_writable_bytes(std::span(back)), 0), EBADF);
}

TEST_F(FileUtilTest, WriteFileAtomicThenReadFileRoundTrips) {
  const std::string path = Path("state.bin");
  std::string contents = "first";
  ASSERT_TRUE(WriteFileAtomic(path, contents, 0600).ok());
  EXPECT_EQ(*ReadFile(path), contents);
  EXPECT_EQ(Mode(path), 0600);

  // Overwrite with binary data larger than one read buffer, and a different mode.
  contents.clear();
  for (int i = 0; i < 200000; ++i) contents.push_back(static_cast<char>(i % 251));
  ASSERT_TRUE(WriteFileAtomic(path, contents, 0640).ok());
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  EXPECT_EQ(Mode(path), 0640);

  ASSERT_TRUE(WriteFileAtomic(path, "", 0644).ok());
  EXPECT_EQ(*ReadFile(path), "");

  // No temporary files are left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);
}

// A simulation's throwaway certificates are written without fsync: the same files, modes and
// identities as an operator's, and the fingerprints the server will know each site by.
TEST_F(FileUtilTest, ProvisioningWithoutFsyncWritesTheSameFederation) {
  ProvisionOptions options;
  options.out_dir = Path("certs");
  options.client_names = {"site-0", "site-1", "site-2"};
  options.durability = Durability::kUnsynced;
  auto files = ProvisionFederation(options);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->client_fingerprints.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto pem = ReadFile(files->client_certs[i]);
    ASSERT_TRUE(pem.ok()) << pem.status();
    EXPECT_EQ(*CertificateFingerprint(*pem), files->client_fingerprints[i]);
    EXPECT_EQ(*CertificateCommonName(*pem), options.client_names[i]);
    EXPECT_TRUE(VerifyClientCertificate(*pem, *ReadFile(files->ca_cert)).ok());
    EXPECT_EQ(Mode(files->client_keys[i]), 0600);
    EXPECT_EQ(Mode(files->client_certs[i]), 0644);
  }
  EXPECT_NE(files->client_fingerprints[0], files->client_fingerprints[1]);
  // The refusal to replace a federation's CA does not depend on durability.
  EXPECT_EQ(ProvisionFederation(options).status().code(), absl::StatusCode::kAlreadyExists);
  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(Path("certs/clients"))) {
    EXPECT_THAT(entry.path().string(), ::testing::Not(HasSubstr(".tmp.")));
  }
}

// `fl certs --admin` and `fl certs add-site`: more certificates from an existing federation's CA,
// an admin's carrying the role the control API checks, a site's not; nothing is ever replaced.
TEST_F(FileUtilTest, IssuesAdminsAndSitesFromAnExistingFederation) {
  ProvisionOptions options;
  options.out_dir = Path("certs");
  options.client_names = {"site-0"};
  auto federation = ProvisionFederation(options);
  ASSERT_TRUE(federation.ok()) << federation.status();
  auto verifier = ClientCertificateVerifier::Create(*ReadFile(federation->ca_cert));
  ASSERT_TRUE(verifier.ok());

  auto admin = IssueFromFederation(options.out_dir, IssuedRole::kAdmin, "alice", 30);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->cert, Path("certs/admins/alice.pem"));
  EXPECT_EQ(Mode(admin->key), 0600);
  auto admin_id = verifier->Verify(*ReadFile(admin->cert));
  ASSERT_TRUE(admin_id.ok()) << admin_id.status();
  EXPECT_TRUE(admin_id->admin);
  EXPECT_EQ(admin_id->common_name, "alice");
  EXPECT_EQ(admin_id->fingerprint, admin->fingerprint);

  auto site = IssueFromFederation(options.out_dir, IssuedRole::kSite, "hospital-b", 30);
  ASSERT_TRUE(site.ok()) << site.status();
  EXPECT_EQ(site->cert, Path("certs/clients/hospital-b.pem"));
  auto site_id = verifier->Verify(*ReadFile(site->cert));
  ASSERT_TRUE(site_id.ok());
  EXPECT_FALSE(site_id->admin);
  EXPECT_FALSE(verifier->Verify(*ReadFile(federation->client_certs[0]))->admin);

  absl::Status again =
      IssueFromFederation(options.out_dir, IssuedRole::kSite, "site-0", 30).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("site-0.pem exists: refusing to replace it"));
  absl::Status no_ca = IssueFromFederation(Path("nowhere"), IssuedRole::kAdmin, "bob", 30).status();
  EXPECT_EQ(no_ca.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_ca.message(), HasSubstr("holds the federation's ca.pem and ca.key"));
  EXPECT_EQ(IssueFromFederation(options.out_dir, IssuedRole::kAdmin, "../x", 30).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// `fl certs renew`: a new key and certificate under the same name, the old kept as *.old; the
// server's keeps its names.
TEST_F(FileUtilTest, RenewReplacesACertificateAndKeepsTheOldBeside) {
  ProvisionOptions options;
  options.out_dir = Path("certs");
  options.client_names = {"site-0"};
  options.server_names = {"fl.example.org", "10.0.0.7"};
  auto federation = ProvisionFederation(options);
  ASSERT_TRUE(federation.ok()) << federation.status();
  const std::string old_pem = *ReadFile(federation->client_certs[0]);

  auto site = RenewFromFederation(options.out_dir, IssuedRole::kSite, "site-0", 400);
  ASSERT_TRUE(site.ok()) << site.status();
  EXPECT_EQ(*ReadFile(federation->client_certs[0] + ".old"), old_pem);
  const std::string new_pem = *ReadFile(site->cert);
  EXPECT_NE(new_pem, old_pem);
  EXPECT_EQ(site->fingerprint, *CertificateFingerprint(new_pem));
  EXPECT_EQ(*CertificateCommonName(new_pem), "site-0");
  // 400 days asked, capped at the CA's end (the federation was made for 365).
  EXPECT_LE(*CertificateNotAfterMs(new_pem),
            *CertificateNotAfterMs(*ReadFile(federation->ca_cert)));
  // A second renewal would lose the first's old pair: refused until it is moved away.
  EXPECT_EQ(RenewFromFederation(options.out_dir, IssuedRole::kSite, "site-0", 30).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(VerifyClientCertificate(new_pem, *ReadFile(federation->ca_cert)).ok());
  EXPECT_EQ(Mode(site->key), 0600);

  auto server = RenewFromFederation(options.out_dir, IssuedRole::kSite, "fl server", 30,
                                    options.server_names);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->cert, Path("certs/server.pem"));
  EXPECT_TRUE(CheckServerCertificate(*ReadFile(server->cert), *ReadFile(server->key),
                                     *ReadFile(federation->ca_cert))
                  .ok());
  EXPECT_EQ(RenewFromFederation(options.out_dir, IssuedRole::kSite, "nobody", 30).status().code(),
            absl::StatusCode::kNotFound);
  // A site that made its own key (fl certs request) is renewed by a new request, not here.
  ASSERT_TRUE(WriteFileAtomic(Path("certs/clients/own.pem"), old_pem).ok());
  absl::Status own = RenewFromFederation(options.out_dir, IssuedRole::kSite, "own", 30).status();
  EXPECT_EQ(own.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(own.message(), HasSubstr("fl certs sign --replace"));
}

TEST_F(FileUtilTest, ReadFileOfMissingPathIsNotFound) {
  const std::string path = Path("missing.txt");
  auto read = ReadFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(path));
}

TEST_F(FileUtilTest, WriteFileAtomicIntoMissingDirectoryFails) {
  const std::string path = Path("no/such/dir/file");
  absl::Status status = WriteFileAtomic(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(Path("no/such/dir")));
  EXPECT_EQ(WriteFileAtomic(Path("f"), "x", 010000).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileUtilTest, MakeDirectoriesCreatesPrivateParents) {
  const std::string nested = Path("a/b/c");
  ASSERT_TRUE(MakeDirectories(nested).ok());
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  EXPECT_EQ(Mode(Path("a")), 0700);
  EXPECT_EQ(Mode(nested), 0700);
  // Existing directories are fine and keep their mode.
  const int parent_mode = Mode(dir_.string());
  ASSERT_TRUE(MakeDirectories(nested + "/").ok());
  EXPECT_EQ(Mode(dir_.string()), parent_mode);
  EXPECT_TRUE(SyncDirectory(nested).ok());

  ASSERT_TRUE(WriteFileAtomic(Path("file"), "x").ok());
  EXPECT_FALSE(MakeDirectories(Path("file/sub")).ok());
  EXPECT_EQ(SyncDirectory(Path("missing")).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fl
