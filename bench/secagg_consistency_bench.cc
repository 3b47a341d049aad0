// What malicious-server security costs a secure-aggregation round: the same SecAgg+ round (n
// sites, d parameters, one process, no network) with identities (each site signs its keys and the
// survivor set with an ECDSA P-256 certificate and, with a verifier of its own as a deployed site
// has, checks its neighbours' keys and the survivors' signatures; the server checks them too)
// against the round without (the consistency stage then carries no signatures). Each site keeps
// its verifier across rounds, as a site process does; the first round with identities (where the
// certificates are checked against the CA) is reported apart. Rounds of both kinds alternate;
// medians are printed, with the ratio. A plain round (no secure aggregation: the server's weighted
// sum of the sites' updates) runs alongside for scale.
//
// The graph is the server's default for the round (k and t for gamma = --corrupt-fraction, 30 %
// of the sites planned to drop, 40 grinding bits: 72 / 37 at n = 100); --graph minimal takes the
// least graph that holds with no colluders instead (20 / 11 at n = 100), which masks less and so
// shows the identities' fixed cost at its largest share.
//   secagg_consistency_bench [--clients 100] [--params 1000000] [--repeats 3] [--dropout 0.05]
//                            [--corrupt-fraction 0.333] [--graph server|minimal]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_check.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/common/crypto.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fl::secagg;  // NOLINT: a benchmark of this one library

using fl::bench::Check;
using fl::bench::Median;

// Each site's signer and verifier, kept across rounds as a site process keeps them: a peer's
// certificate is checked against the CA the first time the site sees it, its signatures each
// time.
struct Sites {
  std::vector<std::shared_ptr<const IdentitySigner>> signers;
  std::vector<std::shared_ptr<const IdentityVerifier>> verifiers;
  std::shared_ptr<const IdentityVerifier> server_verifier;
};

struct RoundTimes {
  double round = 0;                 // everything, sites and server, one after the other
  std::vector<double> site;         // each site's own work
  double server = 0;                // the server's
  size_t unmask_request_bytes = 0;  // the signatures and entries one site receives at unmasking
  size_t unmask_request_signatures = 0;  // how many it checks them from
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

RoundTimes RunRound(const SecAggParams& params, size_t dim, const Sites* sites,
                    const std::set<int>& drop_before_input, uint64_t seed) {
  const int n = params.num_clients;
  RoundTimes out;
  out.site.assign(n, 0);
  const Bytes context = SessionContext(1, 1, "r1.a0.x");
  std::vector<std::unique_ptr<ClientSession>> clients;
  SessionIdentity server_identity;
  server_identity.context = context;
  if (sites != nullptr) server_identity.verifier = sites->server_verifier;
  for (int i = 0; i < n; ++i) {
    SessionIdentity identity;
    identity.context = context;
    if (sites != nullptr) {
      identity.signer = sites->signers[i];
      identity.verifier = sites->verifiers[i];  // its own
    }
    clients.push_back(
        Check(ClientSession::Create(params, i, dim, MakeDeterministicRandomSource(seed * 1000 + i),
                                    std::move(identity)),
              "client"));
  }
  std::unique_ptr<ServerSession> server =
      Check(ServerSession::Create(params, dim, std::move(server_identity)), "server");
  std::vector<float> update(dim);
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : update) v = u(gen);

  const auto start = Clock::now();
  auto site = [&](int i, auto fn) {
    const auto t = Clock::now();
    fn();
    out.site[i] += Since(t);
  };
  auto on_server = [&](auto fn) {
    const auto t = Clock::now();
    fn();
    out.server += Since(t);
  };
  for (int i = 0; i < n; ++i) {
    KeyAdvertisement keys;
    site(i, [&] { keys = Check(clients[i]->AdvertiseKeys(), "advertise"); });
    on_server([&] { Check(server->ReceiveKeys(keys), "receive keys"); });
  }
  on_server([&] { Check(server->CloseAdvertiseKeys(), "close keys"); });
  for (int i = 0; i < n; ++i) {
    KeyDirectory directory = server->DirectoryFor(i);
    EncryptedShares shares;
    site(i, [&] { shares = Check(clients[i]->ShareKeys(directory), "share"); });
    on_server([&] { Check(server->ReceiveShares(shares), "receive shares"); });
  }
  std::map<int, ShareBundle> bundles;
  on_server([&] { bundles = Check(server->CloseShareKeys(), "close shares"); });
  for (int i = 0; i < n; ++i) {
    if (drop_before_input.count(i) != 0) continue;
    MaskedInput masked;
    site(i, [&] { masked = Check(clients[i]->MaskUpdate(bundles[i], update, 1), "mask"); });
    on_server([&] { Check(server->ReceiveMaskedInput(masked), "receive input"); });
  }
  SurvivorList list;
  on_server([&] { list = Check(server->CloseMaskedInput(), "close input"); });
  for (int i : list.survivors) {
    SurvivorSignature signature;
    site(i, [&] { signature = Check(clients[i]->SignSurvivors(list), "sign"); });
    on_server([&] { Check(server->ReceiveSurvivorSignature(signature), "receive signature"); });
  }
  UnmaskRequest request;
  on_server([&] { request = Check(server->CloseConsistency(), "close consistency"); });
  out.unmask_request_signatures = request.signatures.size();
  for (const auto& [id, e] : request.signatures) {
    out.unmask_request_bytes +=
        4 + 64 + e.keys.identity.size() + e.keys.signature.size() + e.signature.size();
  }
  for (int i : list.survivors) {
    UnmaskResponse response;
    site(i, [&] { response = Check(clients[i]->Unmask(request), "unmask"); });
    on_server([&] { Check(server->ReceiveUnmask(response), "receive unmask"); });
  }
  on_server([&] { Check(server->Finish(), "finish"); });
  out.round = Since(start);
  return out;
}

// The server's side of a round without secure aggregation: it sums the survivors' updates (n
// distinct buffers, so that they come from memory as uploads would) with weight 1, what a plain
// FedAvg fold does. No site-side work is counted: a floor, not a like-for-like round.
double PlainRound(int n, size_t dim, const std::set<int>& drop_before_input, uint64_t seed) {
  std::vector<std::vector<float>> updates(n, std::vector<float>(dim));
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::vector<float>& update : updates) {
    for (float& v : update) v = u(gen);
  }
  std::vector<float> sum(dim, 0.0f);
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (drop_before_input.count(i) != 0) continue;
    const std::vector<float>& update = updates[i];
    for (size_t j = 0; j < dim; ++j) sum[j] += update[j];
  }
  const double took = Since(start);
  Check(std::isfinite(sum[dim / 2]) ? absl::OkStatus() : absl::InternalError("sum"), "sum");
  return took;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Secure aggregation with and without the sites' identities (malicious server)");
  int clients = 100;
  size_t params_count = 1000000;
  int repeats = 3;
  double dropout = 0.05;
  double corrupt_fraction = 1.0 / 3;
  app.add_option("--clients", clients)->check(CLI::Range(3, 10000));
  app.add_option("--params", params_count)->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_option("--dropout", dropout, "fraction that drops before its masked input")
      ->check(CLI::Range(0.0, 0.3));
  app.add_option("--corrupt-fraction", corrupt_fraction,
                 "gamma: the consistency check needs floor((|U1| + gamma |U1|) / 2) + 1 signers")
      ->check(CLI::Range(0.0, 0.49));
  std::string graph = "server";
  app.add_option("--graph", graph,
                 "server: the server's default k and t at this gamma (30 % planned dropping, 40 "
                 "grinding bits); minimal: the least that holds without colluders")
      ->check(CLI::IsMember({"server", "minimal"}));
  CLI11_PARSE(app, argc, argv);

  SecAggParams params = graph == "server"
                            ? Check(DefaultSecAggParams(clients, 32, 1000, corrupt_fraction, 0.3,
                                                        PrivacyRiskTarget(40)),
                                    "params")
                            : Check(DefaultSecAggParams(clients), "params");
  params.graph_seed = 7;
  params.corrupt_fraction = corrupt_fraction;
  Sites sites;
  fl::CertAndKey ca = Check(fl::MakeCertificateAuthority("bench CA", 1), "CA");
  fl::CertificateIssuer issuer = Check(fl::CertificateIssuer::Load(ca), "issuer");
  for (int i = 0; i < clients; ++i) {
    fl::CertAndKey cert = Check(issuer.IssueClient(absl::StrCat("site-", i), 1), "site cert");
    sites.signers.push_back(Check(MakeX509Signer(cert.cert_pem, cert.key_pem), "signer"));
    sites.verifiers.push_back(Check(MakeX509Verifier(ca.cert_pem), "verifier"));
  }
  sites.server_verifier = Check(MakeX509Verifier(ca.cert_pem), "verifier");
  std::set<int> dropped;
  for (int i = 0; i < static_cast<int>(dropout * clients); ++i) dropped.insert(3 * i % clients);

  std::printf(
      "secagg_consistency_bench: %d sites, %zu parameters, k %d, t %d (%s graph), %zu drop "
      "before their input, gamma %.3f (%d signatures needed), %d repeats (interleaved)\n",
      clients, params_count, params.num_neighbors, params.threshold, graph.c_str(), dropped.size(),
      corrupt_fraction, ConsistencyThreshold(clients, corrupt_fraction), repeats);
  std::vector<double> semi_round, signed_round, semi_site, signed_site, semi_server, signed_server,
      no_secagg;
  size_t request_bytes = 0, request_signatures = 0;
  // A first round with identities, not counted: the sites meet their peers' certificates.
  const RoundTimes first = RunRound(params, params_count, &sites, dropped, 9);
  for (int r = 0; r < repeats; ++r) {
    no_secagg.push_back(PlainRound(clients, params_count, dropped, 10 + r));
    RoundTimes a = RunRound(params, params_count, nullptr, dropped, 10 + r);
    RoundTimes b = RunRound(params, params_count, &sites, dropped, 10 + r);
    semi_round.push_back(a.round);
    signed_round.push_back(b.round);
    semi_site.push_back(Median(a.site));
    signed_site.push_back(Median(b.site));
    semi_server.push_back(a.server);
    signed_server.push_back(b.server);
    request_bytes = b.unmask_request_bytes;
    request_signatures = b.unmask_request_signatures;
  }
  const double pr = Median(semi_round), sr = Median(signed_round);
  const double ps = Median(semi_site), ss = Median(signed_site);
  const double pv = Median(semi_server), sv = Median(signed_server);
  std::printf(
      "\n| | without identities (semi-honest) | with identities (malicious server) | ratio |\n"
      "|---|---|---|---|\n");
  std::printf("| round, all sites and the server (s) | %.3f | %.3f | %.3fx |\n", pr, sr, sr / pr);
  std::printf("| one site's work, median (ms) | %.1f | %.1f | %.3fx |\n", ps * 1e3, ss * 1e3,
              ss / ps);
  std::printf("| the server's work (s) | %.3f | %.3f | %.3fx |\n", pv, sv, sv / pv);
  std::printf(
      "\nwithout secure aggregation, the server's sum of the %zu updates alone (no site-side "
      "work; a floor, not a like-for-like round): %.3f s\n",
      static_cast<size_t>(clients) - dropped.size(), Median(no_secagg));
  std::printf(
      "\nthe first round with identities (each site checks its peers' certificates "
      "against the CA once), not counted above: %.3f s, one site %.1f ms\n",
      first.round, Median(first.site) * 1e3);
  std::printf("unmask request per site with identities: %zu signatures' entries, %.1f KB\n",
              request_signatures, request_bytes / 1024.0);
  return 0;
}
