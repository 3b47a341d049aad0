// Sites on bad networks, through a TCP proxy the test controls (tcp_proxy.h), over mutual TLS to
// the real server in process: a slow link that stalls now and then still delivers; a connection
// reset in the middle of an upload (a site's process killed, its network dropped) costs that site
// its update for the round, recorded with why, while the round commits with the others, and the
// site is back in the next round.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/client/builtin_models.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "gtest/gtest.h"
#include "tests/integration/tcp_proxy.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

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
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  ASSERT_TRUE(initial.ok()) << initial.status();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, *std::move(initial));
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
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  ASSERT_TRUE(initial.ok()) << initial.status();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, *std::move(initial));
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

}  // namespace
}  // namespace fl::testing
