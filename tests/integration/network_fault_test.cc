// Sites on bad networks, through a TCP proxy the test controls (tcp_proxy.h), over mutual TLS to
// the real server in process: a slow link that stalls now and then still delivers; a connection
// reset in the middle of an upload (a site's process killed, its network dropped) costs that site
// its update for the round, recorded with why, while the round commits with the others, and the
// site is back in the next round; a site's own `fl client` process SIGKILLed mid-download and
// mid-upload costs only its own updates.
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/client/builtin_models.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/tcp_proxy.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kModelBytes = 4 * (784 * 32 + 32 + 32 * 10 + 10);  // FashionMlp: 101,800

std::unique_ptr<client::Trainer> MlpTrainer(int site) {
  absl::StatusOr<std::unique_ptr<client::Trainer>> t =
      client::MakeBuiltinTrainer(FashionMlp(), FashionTrainSlice(site * 500, 500), {});
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

// Two sites direct, the third through `proxy`.
std::vector<std::unique_ptr<ClientThread>> StartSites(const ProvisionedFiles& pki, int port,
                                                      const TcpProxy& proxy) {
  std::vector<std::unique_ptr<ClientThread>> sites;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions o = TlsClientOptions(pki, i, i == 2 ? proxy.port() : port);
    o.reconnect_timeout = absl::Seconds(60);
    o.max_backoff = absl::Milliseconds(500);
    sites.push_back(std::make_unique<ClientThread>(o, MlpTrainer(i)));
  }
  return sites;
}

// The server of `o`, starting from the FashionMlp model of seed 1.
absl::StatusOr<std::unique_ptr<server::Server>> StartMlpServer(const server::ServerOptions& o) {
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  if (!initial.ok()) return initial.status();
  return server::Server::Start(o, *std::move(initial));
}

std::vector<server::RoundRecord> Rounds(server::Server& server, int64_t run) {
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = server.store().Rounds(run);
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  return rounds.ok() ? *rounds : std::vector<server::RoundRecord>{};
}

// 64 KB/s each way, and a 300 ms stall after 20 % of the 16 KiB blocks: the site's download and
// upload of a 100 KB model take seconds, not milliseconds, and every round still commits with all
// three sites' updates.
TEST(NetworkFaultTest, ASiteOnASlowStallingLinkStillDeliversItsUpdates) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(3));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), 3, 2);
  absl::StatusOr<std::unique_ptr<server::Server>> server = StartMlpServer(o);
  ASSERT_TRUE(server.ok()) << server.status();
  TcpProxy proxy((*server)->port(), {.bytes_per_second = 64 * 1024, .stall_probability = 0.2});
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<ClientThread>> sites = StartSites(pki, (*server)->port(), proxy);
  for (auto& s : sites) {
    absl::Status st = s->Join();
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_GE(absl::Now() - start, absl::Seconds(2)) << "the link was not slow";
  EXPECT_GE(proxy.bytes_down(), 2 * kModelBytes);
  EXPECT_GE(proxy.bytes_up(), 2 * kModelBytes);
  const std::vector<server::RoundRecord> rounds = Rounds(**server, 1);
  ASSERT_EQ(rounds.size(), 2u);
  for (const server::RoundRecord& r : rounds) {
    EXPECT_EQ(r.status, server::RoundStatus::kCommitted);
    EXPECT_EQ(r.num_reported, 3) << "round " << r.round;
  }
}

// The proxied site's connection is reset once its upload of round 1 is under way: the server
// records that update as not delivered, with why, round 1 commits with the two others, and the
// site, reconnected, delivers in round 2.
TEST(NetworkFaultTest, AConnectionResetMidUploadCostsThatUpdateOnlyAndTheSiteComesBack) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(3));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), 3, 2);
  o.engine.min_fit_clients = 2;
  absl::StatusOr<std::unique_ptr<server::Server>> server = StartMlpServer(o);
  ASSERT_TRUE(server.ok()) << server.status();
  TcpProxy proxy((*server)->port(), {.bytes_per_second = 64 * 1024});
  std::vector<std::unique_ptr<ClientThread>> sites = StartSites(pki, (*server)->port(), proxy);
  // The site has the model once kModelBytes came down; its upload is under way once 40 KB more
  // than its requests went up.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (proxy.bytes_down() < kModelBytes && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int64_t up_before = proxy.bytes_up();
  while (proxy.bytes_up() < up_before + 40 * 1024 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_LT(absl::Now(), give_up) << "the site's upload never started";
  proxy.CutAll();
  for (auto& s : sites) {
    absl::Status st = s->Join();
    EXPECT_TRUE(st.ok()) << st;
  }
  const std::vector<server::RoundRecord> rounds = Rounds(**server, 1);
  ASSERT_GE(rounds.size(), 2u);
  int committed = 0;
  for (const server::RoundRecord& r : rounds)
    committed += r.status == server::RoundStatus::kCommitted;
  EXPECT_EQ(committed, 2);
  EXPECT_EQ(rounds.front().num_reported, 2) << "round 1 took the cut update";
  EXPECT_EQ(rounds.back().num_reported, 3) << "the site did not come back in round 2";
  const std::string site = *CertificateFingerprint(*ReadFile(pki.client_certs[2]));
  absl::StatusOr<std::vector<server::ParticipationRecord>> parts =
      (*server)->store().Participations(1, 1);
  ASSERT_TRUE(parts.ok());
  bool recorded = false;
  for (const server::ParticipationRecord& p : *parts) {
    if (p.client_id != site || p.status == server::ParticipationStatus::kAccepted) continue;
    recorded = !p.reason.empty();
    EXPECT_NE(p.status, server::ParticipationStatus::kAssigned) << p.reason;
  }
  EXPECT_TRUE(recorded) << "no record of the cut update";
}

// Waits up to `timeout` for `done`; true if it came.
template <typename F>
bool WaitFor(F done, absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time until = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// The real `fl client` of site 2 (FashionMlp on a shard of the Fashion-MNIST test set), through
// the proxy on `port`, until the run ends.
std::unique_ptr<ChildProcess> StartSiteProcess(const ProvisionedFiles& pki, const std::string& dir,
                                               int port) {
  const std::string toml = absl::StrCat(
      "[server]\naddress = \"127.0.0.1:", port, "\"\nca = \"", pki.ca_cert, "\"\ncert = \"",
      pki.client_certs[2], "\"\nkey = \"", pki.client_keys[2], "\"\n\n[data]\nformat = \"idx\"\n",
      "images = \"", FL_FASHION_MNIST_DIR, "/t10k-images-idx3-ubyte.gz\"\nlabels = \"",
      FL_FASHION_MNIST_DIR, "/t10k-labels-idx1-ubyte.gz\"\nnum_shards = 20\nshard = 2\n\n",
      "[model]\nkind = \"mlp\"\nhidden = [32]\nclasses = 10\n\n[training]\nbackend = \"cpu\"\n",
      "cpu_threads = 1\n\n[client]\nreconnect_timeout_s = 60\npoll_wait_s = 1\nheartbeat_s = 1\n",
      "once = true\n");
  const std::string path = dir + "/site-2.toml";
  EXPECT_TRUE(WriteFileAtomic(path, toml).ok());
  return std::make_unique<ChildProcess>(
      std::vector<std::string>{FL_BINARY, "client", "--config", path}, dir + "/site-2.log");
}

// Site 2's own `fl client` process, on a 64 KB/s link, is SIGKILLed in the middle of its
// download of round 1's model, and its connection reset with it (so that nothing the proxy still
// holds reaches either end); started again, it is SIGKILLed in the middle of its upload of round
// 2 the same way. Each round goes on without it (the server drops the dead site once it has been
// silent for client_timeout, or at once when its upload breaks off), commits with the two
// others, and records why site 2's update is missing; started a third time, the site delivers
// in round 3 or, if round 3 began while the dead process still counted as online and dropped
// it before the new one asked, in round 4.
TEST(NetworkFaultTest, ASiteProcessKilledMidDownloadAndMidUploadCostsOnlyItsOwnUpdates) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(3));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), 3, 4);
  o.engine.min_fit_clients = 2;
  o.engine.client_timeout = absl::Seconds(8);
  absl::StatusOr<std::unique_ptr<server::Server>> server = StartMlpServer(o);
  ASSERT_TRUE(server.ok()) << server.status();
  TcpProxy proxy((*server)->port(), {.bytes_per_second = 64 * 1024});
  std::vector<std::unique_ptr<ClientThread>> sites;
  for (int i = 0; i < 2; ++i) {
    client::ClientOptions co = TlsClientOptions(pki, i, (*server)->port());
    co.heartbeat_interval = absl::Seconds(1);
    sites.push_back(std::make_unique<ClientThread>(co, MlpTrainer(i)));
  }
  const std::string site_log = dir.path() + "/site-2.log";
  auto committed = [&] {
    int n = 0;
    for (const server::RoundRecord& r : Rounds(**server, 1))
      n += r.status == server::RoundStatus::kCommitted;
    return n;
  };
  auto kill = [&](ChildProcess& site) {
    site.Kill(SIGKILL);
    proxy.CutAll();
    EXPECT_EQ(site.Wait(), 128 + SIGKILL);
  };

  // Mid-download: half the model has come down (the TLS handshake and the polls are a few KB).
  std::unique_ptr<ChildProcess> site = StartSiteProcess(pki, dir.path(), proxy.port());
  ASSERT_TRUE(WaitFor([&] { return proxy.bytes_down() >= kModelBytes / 2; }))
      << ReadFile(site_log).value_or("");
  kill(*site);
  EXPECT_LT(proxy.bytes_down(), kModelBytes) << "the whole model came down before the kill";
  ASSERT_TRUE(WaitFor([&] { return committed() >= 1; })) << "round 1 waited for the dead site";

  // Mid-upload: the whole model came down again, then 40 KB of the update went up.
  const int64_t down_before = proxy.bytes_down();
  site = StartSiteProcess(pki, dir.path(), proxy.port());
  ASSERT_TRUE(WaitFor([&] { return proxy.bytes_down() >= down_before + kModelBytes; }))
      << ReadFile(site_log).value_or("");
  const int64_t up_before = proxy.bytes_up();
  ASSERT_TRUE(WaitFor([&] { return proxy.bytes_up() >= up_before + 40 * 1024; }))
      << ReadFile(site_log).value_or("");
  kill(*site);
  EXPECT_LT(proxy.bytes_up() - up_before, kModelBytes)
      << "the whole update went up before the kill";
  ASSERT_TRUE(WaitFor([&] { return committed() >= 2; })) << "round 2 waited for the dead site";

  site = StartSiteProcess(pki, dir.path(), proxy.port());
  EXPECT_EQ(site->Wait(), 0) << ReadFile(site_log).value_or("");
  for (auto& s : sites) {
    absl::Status st = s->Join();
    EXPECT_TRUE(st.ok()) << st;
  }
  const std::vector<server::RoundRecord> rounds = Rounds(**server, 1);
  ASSERT_EQ(rounds.size(), 4u);
  for (const server::RoundRecord& r : rounds) {
    EXPECT_EQ(r.status, server::RoundStatus::kCommitted) << "round " << r.round;
  }
  EXPECT_EQ(rounds[0].num_reported, 2);
  EXPECT_EQ(rounds[1].num_reported, 2);
  EXPECT_GE(rounds[2].num_reported, 2);
  EXPECT_EQ(rounds[3].num_reported, 3) << "the restarted site did not deliver";
  // Why site 2's update is missing, as the server recorded it.
  const std::string site_id = *CertificateFingerprint(*ReadFile(pki.client_certs[2]));
  auto reason_of_site_2 = [&](int round) {
    absl::StatusOr<std::vector<server::ParticipationRecord>> parts =
        (*server)->store().Participations(1, round);
    EXPECT_TRUE(parts.ok()) << parts.status();
    const std::vector<server::ParticipationRecord> records =
        parts.value_or(std::vector<server::ParticipationRecord>{});
    for (const server::ParticipationRecord& p : records) {
      if (p.client_id != site_id) continue;
      EXPECT_NE(p.status, server::ParticipationStatus::kAccepted) << "round " << round;
      EXPECT_NE(p.status, server::ParticipationStatus::kAssigned) << "round " << round;
      return p.reason;
    }
    return std::string("no record of site 2");
  };
  EXPECT_THAT(reason_of_site_2(1), HasSubstr("offline: no poll or heartbeat for 8s"));
  const std::string upload_cut = reason_of_site_2(2);
  EXPECT_THAT(upload_cut, HasSubstr("update stream ended after"));
  EXPECT_THAT(upload_cut, Not(HasSubstr(absl::StrCat("after ", kModelBytes, " of"))));
}

}  // namespace
}  // namespace fl::testing
