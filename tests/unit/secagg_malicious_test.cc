// fl::secagg against a malicious server: whole rounds whose sites sign with real certificates of
// one federation CA (identity.h), and a server, played by the tests, that lies to them: different
// survivor sets for different sites (the attack the consistency check stops), a neighbour's keys
// substituted, unsigned or signed by another CA, signatures carried over from another session.
// Each test checks what a site or the server's caller sees: the code and the reason.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::secagg {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kContext = "run 1 round 1 attempt 0";
constexpr int kSites = 40;  // the most clients any test below runs

Bytes ToBytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

// The value of a step that must work for the test to mean anything (a certificate, a session, a
// message an honest party makes): otherwise the test binary stops, saying which step and why.
template <typename T>
T Must(absl::StatusOr<T> v, std::string_view what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%.*s failed: %s\n", static_cast<int>(what.size()), what.data(),
                 v.status().ToString().c_str());
    std::abort();
  }
  return *std::move(v);
}

std::shared_ptr<const IdentitySigner> SignerOf(const CertAndKey& site) {
  return Must(MakeX509Signer(site.cert_pem, site.key_pem), "signer");
}

// One federation CA with a certificate for each site ("site-0", "site-1", ...), and an outsider
// whose certificate another CA issued. Made once: certificates are the slow part.
struct Pki {
  CertAndKey ca;
  std::vector<std::shared_ptr<const IdentitySigner>> sites;
  std::shared_ptr<const IdentitySigner> outsider;
};

Pki MakePki() {
  Pki pki;
  pki.ca = Must(MakeCertificateAuthority("federation-ca", 30), "CA");
  const CertificateIssuer issuer = Must(CertificateIssuer::Load(pki.ca), "issuer");
  for (int c = 0; c < kSites; ++c) {
    pki.sites.push_back(SignerOf(Must(issuer.IssueClient(absl::StrCat("site-", c), 30), "site")));
  }
  const CertAndKey other_ca = Must(MakeCertificateAuthority("other-ca", 30), "other CA");
  pki.outsider = SignerOf(Must(MakeClientCertificate(other_ca, "outsider", 30), "outsider"));
  return pki;
}

const Pki& ThePki() {
  static const Pki pki = MakePki();
  return pki;
}

// A session of one round: the sites' sessions, each with its own certificate and one verifier
// of the federation's CA shared by all (the server's too).
struct Round {
  SecAggParams params;
  size_t dim = 0;
  Bytes context;
  std::shared_ptr<const IdentityVerifier> verifier;
  std::vector<std::vector<uint64_t>> encodings;
  std::vector<std::unique_ptr<ClientSession>> clients;
  std::unique_ptr<ServerSession> server;
  std::vector<KeyAdvertisement> ads;  // as each site made them (AdvertiseAll)
};

struct RoundOptions {
  uint64_t seed = 1;  // the sites' keys (one deterministic source each) and inputs
  std::string_view context = kContext;
  bool server_verifies = true;
};

Round MakeRound(const SecAggParams& params, size_t dim, const RoundOptions& options) {
  Round r;
  r.params = params;
  r.dim = dim;
  r.context = ToBytes(options.context);
  r.verifier = Must(MakeX509Verifier(ThePki().ca.cert_pem), "verifier");
  std::mt19937_64 gen(options.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto rounding = MakeDeterministicRandomSource(options.seed + 1000);
  for (int c = 0; c < params.num_clients; ++c) {
    std::vector<float> x(dim);
    for (float& v : x) v = normal(gen);
    const uint32_t weight = 1 + static_cast<uint32_t>(gen() % params.max_weight);
    r.encodings.push_back(Must(EncodeWeightedUpdate(params, x, weight, *rounding), "encoding"));
    SessionIdentity identity{
        .context = r.context, .signer = ThePki().sites[c], .verifier = r.verifier};
    r.clients.push_back(
        Must(ClientSession::Create(params, c, dim,
                                   MakeDeterministicRandomSource(options.seed * 1000 + c),
                                   std::move(identity)),
             "client"));
  }
  SessionIdentity server_identity{.context = r.context,
                                  .signer = nullptr,
                                  .verifier = options.server_verifies ? r.verifier : nullptr};
  r.server = Must(ServerSession::Create(params, dim, std::move(server_identity)), "server");
  return r;
}

// A session for client `id` of `r`'s round signing with `signer` (a site other than `id`'s own,
// or the outsider): what a server or a colluding site could make.
std::unique_ptr<ClientSession> Impostor(const Round& r, int id,
                                        std::shared_ptr<const IdentitySigner> signer) {
  return Must(
      ClientSession::Create(
          r.params, id, r.dim, MakeDeterministicRandomSource(900 + id),
          SessionIdentity{.context = r.context, .signer = std::move(signer), .verifier = nullptr}),
      "impostor");
}

// Stage 1: every site advertises (kept in r.ads); the first refusal, or the close's status.
absl::Status AdvertiseAll(Round& r) {
  for (auto& client : r.clients) {
    absl::StatusOr<KeyAdvertisement> adv = client->AdvertiseKeys();
    if (!adv.ok()) return adv.status();
    r.ads.push_back(*adv);
    if (absl::Status s = r.server->ReceiveKeys(*adv); !s.ok()) return s;
  }
  return r.server->CloseAdvertiseKeys().status();
}

// Stages 1 to 3, each site given its own directory (DirectoryFor); the sites in `vanish` never
// send their masked input. Returns the survivor list.
absl::StatusOr<SurvivorList> UpToConsistency(Round& r, const std::set<int>& vanish = {}) {
  if (absl::Status s = AdvertiseAll(r); !s.ok()) return s;
  for (int c = 0; c < r.params.num_clients; ++c) {
    absl::StatusOr<EncryptedShares> shares = r.clients[c]->ShareKeys(r.server->DirectoryFor(c));
    if (!shares.ok()) return shares.status();
    if (absl::Status s = r.server->ReceiveShares(*shares); !s.ok()) return s;
  }
  absl::StatusOr<std::map<int, ShareBundle>> bundles = r.server->CloseShareKeys();
  if (!bundles.ok()) return bundles.status();
  for (const auto& [c, bundle] : *bundles) {
    absl::StatusOr<MaskedInput> masked = r.clients[c]->MaskEncodedInput(bundle, r.encodings[c]);
    if (!masked.ok()) return masked.status();
    if (vanish.count(c) != 0) continue;
    if (absl::Status s = r.server->ReceiveMaskedInput(*masked); !s.ok()) return s;
  }
  return r.server->CloseMaskedInput();
}

// Stage 4: every survivor of `list` but the `silent` ones signs it; the server's request.
absl::StatusOr<UnmaskRequest> SignAll(Round& r, const SurvivorList& list,
                                      const std::set<int>& silent = {}) {
  for (int c : list.survivors) {
    if (silent.count(c) != 0) continue;
    absl::StatusOr<SurvivorSignature> signature = r.clients[c]->SignSurvivors(list);
    if (!signature.ok()) return signature.status();
    if (absl::Status s = r.server->ReceiveSurvivorSignature(*signature); !s.ok()) return s;
  }
  return r.server->CloseConsistency();
}

// Stage 5: every signer unmasks; Finish's result.
absl::StatusOr<AggregateResult> UnmaskAll(Round& r, const UnmaskRequest& request) {
  for (const auto& [c, endorsement] : request.signatures) {
    absl::StatusOr<UnmaskResponse> response = r.clients[c]->Unmask(request);
    if (!response.ok()) return response.status();
    if (absl::Status s = r.server->ReceiveUnmask(*response); !s.ok()) return s;
  }
  return r.server->Finish();
}

// The plain sum of the encodings of `survivors` modulo 2^m.
std::vector<uint64_t> PlainSum(const Round& r, const std::vector<int>& survivors) {
  const uint64_t mask =
      r.params.modulus_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << r.params.modulus_bits) - 1;
  std::vector<uint64_t> sum(r.dim + 1, 0);
  for (int c : survivors) {
    for (size_t i = 0; i <= r.dim; ++i) sum[i] = (sum[i] + r.encodings[c][i]) & mask;
  }
  return sum;
}

std::vector<int> AllBut(int n, const std::set<int>& left_out) {
  std::vector<int> out;
  for (int c = 0; c < n; ++c) {
    if (left_out.count(c) == 0) out.push_back(c);
  }
  return out;
}

TEST(SecAggMaliciousServerTest, AnHonestRoundWithIdentitiesIsExact) {
  const SecAggParams params = *DefaultSecAggParams(20);  // k = 14 < n - 1: some entries by digest
  Round r = MakeRound(params, 200, {.seed = 3});
  // Site 5 shares its keys and then vanishes: its mask key is rebuilt from its neighbours.
  absl::StatusOr<SurvivorList> list = UpToConsistency(r, {5});
  ASSERT_TRUE(list.ok()) << list.status();
  for (const KeyAdvertisement& ad : r.ads) {
    EXPECT_EQ(ad.identity, ThePki().sites[ad.client]->identity());
    EXPECT_FALSE(ad.signature.empty());
  }
  const KeyDirectory dir = r.server->DirectoryFor(0);
  EXPECT_EQ(dir.keys.size(), static_cast<size_t>(params.num_neighbors) + 1);
  EXPECT_EQ(dir.digests.size(), static_cast<size_t>(params.num_clients - params.num_neighbors - 1));
  const std::vector<int> survivors = AllBut(20, {5});
  EXPECT_EQ(list->survivors, survivors);

  absl::StatusOr<UnmaskRequest> request = SignAll(r, *list);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->survivors, survivors);
  EXPECT_EQ(request->dropped, std::vector<int>{5});
  ASSERT_EQ(request->signatures.size(), 19u);
  for (const auto& [c, endorsement] : request->signatures) {
    EXPECT_EQ(endorsement.keys.client, c);
    EXPECT_FALSE(endorsement.signature.empty());
  }
  absl::StatusOr<AggregateResult> result = UnmaskAll(r, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, survivors);
  const std::vector<uint64_t> expected = PlainSum(r, survivors);
  EXPECT_TRUE(result->sum == expected) << "the unmasked sum differs from the plain sum";
  absl::StatusOr<std::vector<float>> mean = DecodeWeightedMean(params, expected);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(result->mean, *mean);
}

// A server that shows a client as a survivor to some sites and as dropped to the others would get
// its self-mask seed from the first and its mask key from the second, and with them its input.
// Each honest site signs one set, so no two sets both gather more than half of U1: only one side
// of a split can ever reveal anything.
TEST(SecAggMaliciousServerTest, ASplitSurvivorSetCannotBeUnmaskedOnBothSides) {
  const SecAggParams params = *DefaultSecAggParams(9);  // k = 8 (everyone), t = 5
  ASSERT_EQ(ConsistencyThreshold(9, 0), 5);
  const int victim = 0;
  // What the second group is told dropped: the victim itself, or one of its neighbours.
  for (const int claimed : {victim, 1}) {
    SCOPED_TRACE(absl::StrCat("client ", claimed, " claimed dropped"));
    Round r = MakeRound(params, 50, {.seed = 40 + static_cast<uint64_t>(claimed)});
    absl::StatusOr<SurvivorList> truth = UpToConsistency(r);
    ASSERT_TRUE(truth.ok()) << truth.status();
    const std::vector<int> set_a = truth->survivors;  // everyone
    ASSERT_EQ(set_a.size(), 9u);
    const std::vector<int> set_b = AllBut(9, {claimed});
    // Group A (the victim and the claimed client among them: a site refuses to sign a list that
    // leaves it out) is shown set A, group B set B. Each list alone looks honest: all sign.
    const std::set<int> group_a = {0, 1, 2, 3};
    std::map<int, SurvivorEndorsement> over_a, over_b;
    for (int c = 0; c < 9; ++c) {
      const bool in_a = group_a.count(c) != 0;
      absl::StatusOr<SurvivorSignature> signature =
          r.clients[c]->SignSurvivors(SurvivorList{.survivors = in_a ? set_a : set_b});
      ASSERT_TRUE(signature.ok()) << signature.status();
      (in_a ? over_a : over_b)[c] =
          SurvivorEndorsement{.keys = r.ads[c], .signature = signature->signature};
    }
    // The server's own session, which verifies against the U3 it holds, takes none of B's.
    const absl::Status taken = r.server->ReceiveSurvivorSignature(
        SurvivorSignature{.client = 4, .signature = over_b.at(4).signature});
    EXPECT_EQ(taken.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(std::string(taken.message()),
                HasSubstr("the signature of client 4 over the survivors does not verify"));

    std::map<int, SurvivorEndorsement> every = over_a;
    every.insert(over_b.begin(), over_b.end());
    auto unmask = [&](int c, const std::vector<int>& survivors, std::vector<int> dropped,
                      const std::map<int, SurvivorEndorsement>& signatures) {
      return r.clients[c]->Unmask(UnmaskRequest{
          .survivors = survivors, .dropped = std::move(dropped), .signatures = signatures});
    };
    auto expect_refused = [](const absl::StatusOr<UnmaskResponse>& response,
                             const std::string& why) {
      EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition) << why;
      return std::string(response.status().message());
    };

    // 1. A site of group A asked to unmask for set B: not the set it signed.
    std::string m = expect_refused(unmask(2, set_b, {claimed}, over_b), "set B to group A");
    EXPECT_THAT(m, HasSubstr("client 2 refuses to unmask: the survivors in the request are not "
                             "the set it signed (8 listed, 9 signed)"));
    // 2. Its own set with every signature the server holds: those over B do not verify over A.
    m = expect_refused(unmask(2, set_a, {}, every), "all signatures to group A");
    EXPECT_THAT(m, HasSubstr("client 2 refuses to unmask: only 4 survivors' signatures over the "
                             "survivor set it signed verify; 5 of the 9 sites of the round are "
                             "needed"));
    EXPECT_THAT(m, HasSubstr("client 4: signature by site-4"));
    EXPECT_THAT(m, HasSubstr("does not verify"));
    // 3. One of A's signatures relayed a second time as site 4's (with site 0's certificate in
    //    site 4's entry): the entry is not the directory's, and it is not counted.
    std::map<int, SurvivorEndorsement> padded = over_a;
    padded[4] = SurvivorEndorsement{.keys = r.ads[4], .signature = over_a.at(0).signature};
    padded[4].keys.identity = r.ads[0].identity;
    m = expect_refused(unmask(2, set_a, {}, padded), "a signer counted twice");
    EXPECT_THAT(m, HasSubstr("only 4 survivors' signatures"));
    EXPECT_THAT(m, HasSubstr("client 4's relayed keys are not those of the directory"));
    // 4. A's signatures forwarded to a site of group B, with B's set or with A's.
    m = expect_refused(unmask(5, set_b, {claimed}, over_a), "A's signatures to group B");
    EXPECT_THAT(m, HasSubstr("client 5 refuses to unmask: only 0 survivors' signatures over the "
                             "survivor set it signed verify"));
    m = expect_refused(unmask(5, set_a, {}, every), "set A to group B");
    EXPECT_THAT(m, HasSubstr("client 5 refuses to unmask: the survivors in the request are not "
                             "the set it signed (9 listed, 8 signed)"));
    for (int c : group_a) EXPECT_TRUE(r.clients[c]->holds_secrets()) << c;

    // 5. Set B has its majority (5 of 9): group B unmasks, and the server gets the claimed
    //    client's mask key, but not one share of its self-mask seed: group A never reveals.
    int seed_shares = 0;
    int key_shares = 0;
    for (int c = 4; c < 9; ++c) {
      absl::StatusOr<UnmaskResponse> response = unmask(c, set_b, {claimed}, over_b);
      ASSERT_TRUE(response.ok()) << response.status();
      seed_shares += static_cast<int>(response->self_seed_shares.count(claimed));
      key_shares += static_cast<int>(response->mask_key_shares.count(claimed));
    }
    for (int c : group_a) {
      m = expect_refused(unmask(c, set_a, {}, every), "group A after group B unmasked");
      EXPECT_THAT(m, HasSubstr("only 4 survivors' signatures"));
    }
    EXPECT_EQ(key_shares, 5);
    EXPECT_EQ(seed_shares, 0) << "both secrets of client " << claimed << " reached the server";
  }
}

TEST(SecAggMaliciousServerTest, ASiteRefusesANeighboursSubstitutedUnsignedOrForeignKeys) {
  const SecAggParams params = *DefaultSecAggParams(6);  // k = 5: every other site is a neighbour
  Round r = MakeRound(params, 20, {.seed = 50});
  ASSERT_TRUE(AdvertiseAll(r).ok());
  const KeyDirectory honest = r.server->DirectoryFor(0);
  ASSERT_EQ(honest.keys.size(), 6u);
  auto refused = [&](const KeyDirectory& dir, const std::string& why) {
    absl::StatusOr<EncryptedShares> shares = r.clients[0]->ShareKeys(dir);
    EXPECT_EQ(shares.status().code(), absl::StatusCode::kFailedPrecondition) << why;
    return std::string(shares.status().message());
  };
  // The server's own cipher key in place of neighbour 2's (to read what site 0 sends it): the
  // signature does not cover it, and the server cannot sign as site-2.
  auto attacker = MakeDeterministicRandomSource(666);
  const X25519KeyPair server_keys = Must(GenerateX25519KeyPair(*attacker), "server keys");
  KeyDirectory dir = honest;
  dir.keys[2].cipher_public = server_keys.public_key;
  std::string m = refused(dir, "substituted key");
  EXPECT_THAT(m,
              HasSubstr("client 0 refuses the directory: the keys of neighbour 2 do not verify"));
  EXPECT_THAT(m, HasSubstr("signature by site-2"));
  // Unsigned: without the signature, or without the identity too.
  dir = honest;
  dir.keys[2].signature.clear();
  EXPECT_THAT(refused(dir, "unsigned"),
              HasSubstr("client 0 refuses the directory: neighbour 2's keys are not signed"));
  dir.keys[2].identity.clear();
  EXPECT_THAT(refused(dir, "no identity"), HasSubstr("neighbour 2's keys are not signed"));
  // Keys for id 2 signed with a certificate of another CA.
  dir = honest;
  dir.keys[2] = Must(Impostor(r, 2, ThePki().outsider)->AdvertiseKeys(), "outsider's keys");
  m = refused(dir, "another CA");
  EXPECT_THAT(m, HasSubstr("client 0 refuses the directory: the keys of neighbour 2 do not verify: "
                           "the certificate of outsider"));
  EXPECT_THAT(m, HasSubstr("is not trusted"));
  // Keys for id 2 signed by site-1 of the federation, colluding: its identity is then twice among
  // client 0's neighbours.
  dir = honest;
  dir.keys[2] = Must(Impostor(r, 2, ThePki().sites[1])->AdvertiseKeys(), "colluder's keys");
  EXPECT_THAT(refused(dir, "colluding site"),
              HasSubstr("client 0 refuses the directory: neighbour 2 signs with the certificate "
                        "of client 1 (one site may hold one place in a round)"));
  // The same, its certificate respelled (text before the PEM block, which parses the same) so
  // that the two entries' identities differ as strings: the fingerprint is what counts.
  dir = honest;
  {
    std::unique_ptr<ClientSession> respelled = Impostor(r, 2, ThePki().sites[1]);
    KeyAdvertisement keys = Must(respelled->AdvertiseKeys(), "colluder's keys");
    ASSERT_EQ(keys.identity.rfind("-----BEGIN", 0), 0u);
    dir.keys[2] = keys;
  }
  {
    // Re-sign under a respelled identity: the signature covers the keys, not the PEM text.
    KeyAdvertisement& k = dir.keys[2];
    k.identity = "respelled\n" + k.identity;
  }
  EXPECT_THAT(refused(dir, "respelled colluder"),
              HasSubstr("neighbour 2 signs with the certificate of client 1"));

  // None of it cost the round: the honest directory is taken, and the sum is exact.
  for (int c = 0; c < 6; ++c) {
    absl::StatusOr<EncryptedShares> shares =
        r.clients[c]->ShareKeys(c == 0 ? honest : r.server->DirectoryFor(c));
    ASSERT_TRUE(shares.ok()) << shares.status();
    ASSERT_TRUE(r.server->ReceiveShares(*shares).ok());
  }
  std::map<int, ShareBundle> bundles = Must(r.server->CloseShareKeys(), "bundles");
  for (const auto& [c, bundle] : bundles) {
    absl::StatusOr<MaskedInput> masked = r.clients[c]->MaskEncodedInput(bundle, r.encodings[c]);
    ASSERT_TRUE(masked.ok()) << masked.status();
    ASSERT_TRUE(r.server->ReceiveMaskedInput(*masked).ok());
  }
  const SurvivorList list = Must(r.server->CloseMaskedInput(), "survivors");
  absl::StatusOr<UnmaskRequest> request = SignAll(r, list);
  ASSERT_TRUE(request.ok()) << request.status();
  absl::StatusOr<AggregateResult> result = UnmaskAll(r, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->sum == PlainSum(r, AllBut(6, {})));
}

TEST(SecAggMaliciousServerTest, ServerRefusesAdvertisementsThatDoNotVerify) {
  const SecAggParams params = *DefaultSecAggParams(6);
  Round r = MakeRound(params, 20, {.seed = 60});
  std::vector<KeyAdvertisement> ads;
  for (auto& client : r.clients) ads.push_back(Must(client->AdvertiseKeys(), "advertise"));
  ASSERT_TRUE(r.server->ReceiveKeys(ads[0]).ok());
  auto refused = [&](const KeyAdvertisement& ad, absl::StatusCode code, const std::string& why) {
    const absl::Status st = r.server->ReceiveKeys(ad);
    EXPECT_EQ(st.code(), code) << why << ": " << st;
    return std::string(st.message());
  };
  // A signature that does not verify: a bit of it flipped, or a key changed after signing.
  KeyAdvertisement bad = ads[1];
  bad.signature.back() ^= 1;
  std::string m = refused(bad, absl::StatusCode::kUnauthenticated, "flipped bit");
  EXPECT_THAT(m, HasSubstr("the keys of client 1 do not verify: signature by site-1"));
  bad = ads[1];
  auto other = MakeDeterministicRandomSource(61);
  bad.mask_public = Must(GenerateX25519KeyPair(*other), "key").public_key;
  EXPECT_THAT(refused(bad, absl::StatusCode::kUnauthenticated, "key changed"),
              HasSubstr("the keys of client 1 do not verify"));
  // Without an identity or without a signature.
  bad = ads[1];
  bad.identity.clear();
  EXPECT_THAT(refused(bad, absl::StatusCode::kInvalidArgument, "no identity"),
              HasSubstr("client 1 advertised keys without signing them with its certificate"));
  bad = ads[1];
  bad.signature.clear();
  EXPECT_THAT(refused(bad, absl::StatusCode::kInvalidArgument, "no signature"),
              HasSubstr("client 1 advertised keys without signing them with its certificate"));
  // Another client's certificate and signature on its own keys; another's whole advertisement.
  bad = ads[1];
  bad.identity = ads[0].identity;
  bad.signature = ads[0].signature;
  EXPECT_THAT(refused(bad, absl::StatusCode::kUnauthenticated, "site 0's signature"),
              HasSubstr("the keys of client 1 do not verify: signature by site-0"));
  bad = ads[0];
  bad.client = 1;
  EXPECT_THAT(
      refused(bad, absl::StatusCode::kInvalidArgument, "site 0's advertisement"),
      HasSubstr("client 1 advertised a cipher_public key that client 0 already advertised"));
  // One certificate for two clients: site-0 signs fresh keys, correctly, as client 4.
  EXPECT_THAT(refused(Must(Impostor(r, 4, ThePki().sites[0])->AdvertiseKeys(), "twin"),
                      absl::StatusCode::kInvalidArgument, "one site twice"),
              HasSubstr("client 4 advertised keys with the identity of another client"));
  // A certificate of another CA: the verifier's PERMISSION_DENIED.
  m = refused(Must(Impostor(r, 5, ThePki().outsider)->AdvertiseKeys(), "outsider"),
              absl::StatusCode::kPermissionDenied, "another CA");
  EXPECT_THAT(m, HasSubstr("the keys of client 5 do not verify: the certificate of outsider"));
  EXPECT_THAT(m, HasSubstr("is not trusted"));
  // Not a certificate at all: the verifier's INVALID_ARGUMENT.
  bad = ads[3];
  bad.identity = "not a certificate";
  m = refused(bad, absl::StatusCode::kInvalidArgument, "no certificate");
  EXPECT_THAT(m, HasSubstr("the keys of client 3 do not verify"));
  EXPECT_THAT(m, HasSubstr("is not a PEM certificate"));
  // The refusals left nothing behind: every genuine advertisement is taken.
  for (int c = 1; c < 6; ++c) EXPECT_TRUE(r.server->ReceiveKeys(ads[c]).ok()) << c;
  absl::StatusOr<KeyDirectory> dir = r.server->CloseAdvertiseKeys();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->keys.size(), 6u);
}

TEST(SecAggMaliciousServerTest, KeysSignedForAnotherSessionDoNotVerify) {
  const SecAggParams params = *DefaultSecAggParams(6);
  Round a = MakeRound(params, 20, {.seed = 70});
  Round b = MakeRound(params, 20, {.seed = 70, .context = "run 1 round 1 attempt 1"});
  ASSERT_TRUE(AdvertiseAll(a).ok());
  for (auto& client : b.clients) b.ads.push_back(Must(client->AdvertiseKeys(), "advertise"));
  // The same sites with the same keys: only the context differs.
  ASSERT_EQ(a.ads[2].cipher_public, b.ads[2].cipher_public);
  ASSERT_EQ(a.ads[2].mask_public, b.ads[2].mask_public);
  ASSERT_EQ(a.ads[2].identity, b.ads[2].identity);
  // Session B's server refuses site 2's advertisement of session A.
  const absl::Status st = b.server->ReceiveKeys(a.ads[2]);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("the keys of client 2 do not verify: signature by site-2"));
  for (const KeyAdvertisement& ad : b.ads) ASSERT_TRUE(b.server->ReceiveKeys(ad).ok());
  ASSERT_TRUE(b.server->CloseAdvertiseKeys().ok());
  // A site of session B handed it in its directory: the same keys, signed for another context.
  KeyDirectory dir = b.server->DirectoryFor(0);
  dir.keys[2] = a.ads[2];
  absl::StatusOr<EncryptedShares> shares = b.clients[0]->ShareKeys(dir);
  EXPECT_EQ(shares.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(shares.status().message()),
              HasSubstr("client 0 refuses the directory: the keys of neighbour 2 do not verify"));
  EXPECT_TRUE(b.clients[0]->ShareKeys(b.server->DirectoryFor(0)).ok());
}

TEST(SecAggMaliciousServerTest, TheGraphFollowsTheDirectoryAndTheContextNotTheServer) {
  const SecAggParams params = *DefaultSecAggParams(40);  // k = 16; graph_seed 0 in every session
  ASSERT_LT(params.num_neighbors, 39);
  auto graph_of = [&](uint64_t seed, std::string_view context) {
    Round r = MakeRound(params, 4, {.seed = seed, .context = context});
    EXPECT_TRUE(AdvertiseAll(r).ok());
    std::vector<std::vector<int>> neighbors;
    for (int c = 0; c < 40; ++c) neighbors.push_back(r.server->graph().Neighbors(c));
    return neighbors;
  };
  auto same_neighborhoods = [](const std::vector<std::vector<int>>& x,
                               const std::vector<std::vector<int>>& y) {
    int same = 0;
    for (size_t c = 0; c < x.size(); ++c) same += x[c] == y[c];
    return same;
  };
  const std::vector<std::vector<int>> first = graph_of(1, kContext);
  ASSERT_EQ(first.size(), 40u);
  ASSERT_EQ(first[0].size(), static_cast<size_t>(params.num_neighbors));
  // The same directory (keys and certificates) and context: the same graph, fresh signatures
  // notwithstanding.
  EXPECT_EQ(graph_of(1, kContext), first);
  // Other keys (another directory), or the same keys under another context: another graph.
  const std::vector<std::vector<int>> other_keys = graph_of(2, kContext);
  EXPECT_NE(other_keys[0], first[0]);
  EXPECT_LT(same_neighborhoods(other_keys, first), 4);
  EXPECT_LT(same_neighborhoods(graph_of(1, "run 1 round 2 attempt 0"), first), 4);
  // Not the graph the server's graph_seed alone would give.
  absl::StatusOr<NeighborGraph> from_seed =
      NeighborGraph::Make(40, params.num_neighbors, params.graph_seed);
  ASSERT_TRUE(from_seed.ok());
  std::vector<std::vector<int>> seeded;
  for (int c = 0; c < 40; ++c) seeded.push_back(from_seed->Neighbors(c));
  EXPECT_LT(same_neighborhoods(seeded, first), 4);
}

TEST(SecAggMaliciousServerTest, ASurvivorSignatureThatDoesNotVerifyIsRefusedAndTheRoundGoesOn) {
  const SecAggParams params = *DefaultSecAggParams(8);  // k = 7, t = 4; 5 signatures needed
  Round r = MakeRound(params, 50, {.seed = 80});
  absl::StatusOr<SurvivorList> list = UpToConsistency(r);
  ASSERT_TRUE(list.ok()) << list.status();
  const SurvivorSignature own = Must(r.clients[3]->SignSurvivors(*list), "sign");
  const SurvivorSignature fourth = Must(r.clients[4]->SignSurvivors(*list), "sign");
  auto expect_unauthenticated = [&](const SurvivorSignature& signature, const std::string& why) {
    const absl::Status st = r.server->ReceiveSurvivorSignature(signature);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << why << ": " << st;
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("the signature of client 3 over the survivors does not verify: "))
        << why;
  };
  SurvivorSignature bad = own;
  bad.signature.back() ^= 1;
  expect_unauthenticated(bad, "flipped bit");
  expect_unauthenticated(SurvivorSignature{.client = 3, .signature = fourth.signature},
                         "site 4's signature");
  expect_unauthenticated(SurvivorSignature{.client = 3, .signature = {}}, "none");
  // Site 3's genuine signature never arrives; the others do.
  ASSERT_TRUE(r.server->ReceiveSurvivorSignature(fourth).ok());
  absl::StatusOr<UnmaskRequest> request = SignAll(r, *list, /*silent=*/{3, 4});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->signatures.size(), 7u);
  EXPECT_EQ(request->signatures.count(3), 0u);
  // Site 3 signed this very set, so it would unmask; the server does not hear it.
  absl::StatusOr<UnmaskResponse> unheard = r.clients[3]->Unmask(*request);
  ASSERT_TRUE(unheard.ok()) << unheard.status();
  const absl::Status st = r.server->ReceiveUnmask(*unheard);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("client 3 answered the unmasking but did not sign the survivor set"));
  // The seven signers rebuild every seed, site 3's too: its input is in the exact sum.
  absl::StatusOr<AggregateResult> result = UnmaskAll(r, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, AllBut(8, {}));
  EXPECT_TRUE(result->sum == PlainSum(r, AllBut(8, {})));
}

TEST(SecAggMaliciousServerTest, TheConsistencyCheckNeedsMoreThanHalfOfTheSitesThatAdvertised) {
  const SecAggParams params = *DefaultSecAggParams(8);  // U1 = 8: 5 signatures needed
  Round r = MakeRound(params, 50, {.seed = 90});
  absl::StatusOr<SurvivorList> list = UpToConsistency(r, {6, 7});
  ASSERT_TRUE(list.ok()) << list.status();
  const std::vector<int> survivors = AllBut(8, {6, 7});
  ASSERT_EQ(list->survivors, survivors);
  // Four of the six survivors sign: a majority of U3, not of U1.
  std::map<int, SurvivorEndorsement> endorsements;
  for (int c = 0; c < 4; ++c) {
    const SurvivorSignature signature = Must(r.clients[c]->SignSurvivors(*list), "sign");
    ASSERT_TRUE(r.server->ReceiveSurvivorSignature(signature).ok());
    endorsements[c] = SurvivorEndorsement{.keys = r.ads[c], .signature = signature.signature};
  }
  absl::StatusOr<UnmaskRequest> early = r.server->CloseConsistency();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(early.status().message()),
      HasSubstr("only 4 survivors signed the survivor set; 5 of the 8 sites of the round (a "
                "majority with 0 of them colluding) must sign it before any reveals a share"));
  // A server that skips its own check: the sites count for themselves.
  absl::StatusOr<UnmaskResponse> refused = r.clients[0]->Unmask(
      UnmaskRequest{.survivors = survivors, .dropped = {6, 7}, .signatures = endorsements});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("client 0 refuses to unmask: only 4 survivors' signatures over the "
                        "survivor set it signed verify; 5 of the 8 sites of the round are "
                        "needed"));
  EXPECT_TRUE(r.clients[0]->holds_secrets());
  // A fifth signature: the stage closes and the round is exact over the six survivors.
  ASSERT_TRUE(
      r.server->ReceiveSurvivorSignature(Must(r.clients[4]->SignSurvivors(*list), "sign")).ok());
  absl::StatusOr<UnmaskRequest> request = r.server->CloseConsistency();
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->dropped, (std::vector<int>{6, 7}));
  absl::StatusOr<AggregateResult> result = UnmaskAll(r, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, survivors);
  EXPECT_TRUE(result->sum == PlainSum(r, survivors));
}

// The count is of the round's n sites, not of the directory the server sent: a server that left
// honest sites out (here three of nine never advertise) must not lower the majority with them.
TEST(SecAggMaliciousServerTest, TheMajorityIsOfTheRoundsSitesNotOfTheDirectory) {
  const SecAggParams params = *DefaultSecAggParams(9);  // k 8, t 5; T(9, 0) = 5
  Round r = MakeRound(params, 30, {.seed = 91});
  const std::vector<int> present = {0, 1, 2, 3, 4, 5};  // U1 = 6: its own majority would be 4
  for (int c : present) {
    KeyAdvertisement keys = Must(r.clients[c]->AdvertiseKeys(), "advertise");
    ASSERT_TRUE(r.server->ReceiveKeys(keys).ok());
  }
  ASSERT_TRUE(r.server->CloseAdvertiseKeys().ok());
  for (int c : present) {
    EncryptedShares shares = Must(r.clients[c]->ShareKeys(r.server->DirectoryFor(c)), "share");
    ASSERT_TRUE(r.server->ReceiveShares(shares).ok());
  }
  std::map<int, ShareBundle> bundles = Must(r.server->CloseShareKeys(), "close shares");
  for (int c : present) {
    MaskedInput masked = Must(r.clients[c]->MaskEncodedInput(bundles[c], r.encodings[c]), "mask");
    ASSERT_TRUE(r.server->ReceiveMaskedInput(masked).ok());
  }
  const SurvivorList list = Must(r.server->CloseMaskedInput(), "close input");
  for (int c : {0, 1, 2, 3}) {
    ASSERT_TRUE(
        r.server->ReceiveSurvivorSignature(Must(r.clients[c]->SignSurvivors(list), "sign")).ok());
  }
  absl::StatusOr<UnmaskRequest> early = r.server->CloseConsistency();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()),
              HasSubstr("only 4 survivors signed the survivor set; 5 of the 9 sites of the round"));
  ASSERT_TRUE(
      r.server->ReceiveSurvivorSignature(Must(r.clients[4]->SignSurvivors(list), "sign")).ok());
  absl::StatusOr<UnmaskRequest> request = r.server->CloseConsistency();
  ASSERT_TRUE(request.ok()) << request.status();
  // A site given only four of the signatures refuses, whatever the directory's size.
  UnmaskRequest four = *request;
  four.signatures.erase(4);
  absl::StatusOr<UnmaskResponse> refused = r.clients[0]->Unmask(four);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("only 4 survivors' signatures over the survivor set it signed verify; 5 "
                        "of the 9 sites of the round are needed"));
}

}  // namespace
}  // namespace fl::secagg
