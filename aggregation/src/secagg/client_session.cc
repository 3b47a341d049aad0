#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/secagg_masking.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"

namespace fl::secagg {

enum class ClientStage { kAdvertise, kShare, kMask, kConsistency, kUnmask, kDone };

struct ClientSession::State {
  SecAggParams params;
  int id = -1;
  size_t dimension = 0;  // of the update
  size_t words = 0;      // of an input: EncodedWords(params, dimension)
  std::unique_ptr<RandomSource> rng;
  SessionIdentity identity;
  Key32 session{};                    // the session's hash, once the directory came (ShareKeys)
  std::map<int, Key32> digests;       // of every entry of U1
  NeighborGraph graph;                // from the session's hash
  std::vector<int> signed_survivors;  // the set this client signed (SignSurvivors)
  KeyAdvertisement advertised;        // what it sent (AdvertiseKeys), to find in the directory
  ClientStage stage = ClientStage::kAdvertise;
  X25519KeyPair cipher_keys;
  X25519KeyPair mask_keys;
  Key32 self_seed{};
  std::map<int, KeyAdvertisement> neighbor_keys;  // neighbours in U1
  // Shares this client holds of each neighbour in U2 that sent them.
  std::map<int, internal::SharePlaintext> held;

  // The private keys, the self-mask seed and the shares held, overwritten (Wipe): once the
  // unmasking is answered, and when the session goes.
  void WipeSecrets() {
    Wipe(cipher_keys.private_key);
    Wipe(mask_keys.private_key);
    Wipe(self_seed);
    for (auto& [peer, plain] : held) {
      for (ShamirShare* share : {&plain.mask_key_share, &plain.self_seed_share}) {
        Wipe(std::span<uint8_t>(reinterpret_cast<uint8_t*>(share->y.data()), sizeof(share->y)));
      }
    }
    held.clear();
    wiped = true;
  }
  bool wiped = false;
  ~State() { WipeSecrets(); }
};

namespace {

// A RandomSource read as the DP code's BitSource (both fill byte spans).
class RandomBits final : public aggregation::dp::BitSource {
 public:
  explicit RandomBits(RandomSource& source) : source_(source) {}
  absl::Status Fill(std::span<uint8_t> out) override { return source_.Fill(out); }

 private:
  RandomSource& source_;
};

absl::Status OutOfOrder(const char* call, ClientStage stage) {
  static constexpr const char* kNames[] = {"advertise keys", "share keys", "masked input",
                                           "consistency",    "unmasking",  "done"};
  return absl::FailedPreconditionError(
      absl::StrCat(call, " called out of order: the client session is at stage '",
                   kNames[static_cast<int>(stage)], "'"));
}

// verify(i) for i in [0, count), on up to 4 threads: a site's signature checks are independent and
// the verifier is thread-safe, so a round's dozens of ECDSA verifications (about 60 us each) take
// a fraction of the wall time. Results in order.
template <typename Fn>
std::vector<absl::StatusOr<std::string>> VerifyInParallel(size_t count, Fn verify) {
  std::vector<absl::StatusOr<std::string>> out(count, absl::UnknownError("not verified"));
  const size_t threads =
      std::min<size_t>({count, 4, std::max<size_t>(1, std::thread::hardware_concurrency())});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) out[i] = verify(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

}  // namespace

ClientSession::ClientSession(std::unique_ptr<State> state) : state_(std::move(state)) {}
ClientSession::~ClientSession() = default;

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Create(
    const SecAggParams& params, int client, size_t dimension, std::unique_ptr<RandomSource> rng,
    SessionIdentity identity) {
  if (absl::Status s = ValidateSecAggParams(params); !s.ok()) return s;
  if (client < 0 || client >= params.num_clients) {
    return absl::InvalidArgumentError(
        absl::StrCat("client id ", client, " is outside [0, ", params.num_clients, ")"));
  }
  if (dimension < 1) return absl::InvalidArgumentError("dimension must be at least 1");
  if (!rng) return absl::InvalidArgumentError("a RandomSource is required");
  auto state = std::make_unique<State>();
  state->params = params;
  state->id = client;
  state->dimension = dimension;
  state->words = EncodedWords(params, dimension);
  state->rng = std::move(rng);
  state->identity = std::move(identity);
  return std::unique_ptr<ClientSession>(new ClientSession(std::move(state)));
}

absl::StatusOr<KeyAdvertisement> ClientSession::AdvertiseKeys() {
  State& s = *state_;
  if (s.stage != ClientStage::kAdvertise) return OutOfOrder("AdvertiseKeys", s.stage);
  absl::StatusOr<X25519KeyPair> c = GenerateX25519KeyPair(*s.rng);
  if (!c.ok()) return c.status();
  absl::StatusOr<X25519KeyPair> m = GenerateX25519KeyPair(*s.rng);
  if (!m.ok()) return m.status();
  KeyAdvertisement out;
  out.client = s.id;
  out.cipher_public = c->public_key;
  out.mask_public = m->public_key;
  if (s.identity.signer != nullptr) {
    out.identity = s.identity.signer->identity();
    absl::StatusOr<Bytes> signature =
        s.identity.signer->Sign(internal::AdvertisementMessage(s.identity.context, out));
    if (!signature.ok()) return signature.status();
    out.signature = *std::move(signature);
  }
  s.cipher_keys = *c;
  s.mask_keys = *m;
  s.advertised = out;
  s.stage = ClientStage::kShare;
  return out;
}

absl::StatusOr<EncryptedShares> ClientSession::ShareKeys(const KeyDirectory& directory) {
  State& s = *state_;
  if (s.stage != ClientStage::kShare) return OutOfOrder("ShareKeys", s.stage);
  auto own = directory.keys.find(s.id);
  if (own == directory.keys.end() || own->second.cipher_public != s.cipher_keys.public_key ||
      own->second.mask_public != s.mask_keys.public_key ||
      own->second.identity != s.advertised.identity ||
      own->second.signature != s.advertised.signature) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id, ": the key directory does not hold the keys it advertised"));
  }
  std::set<Key32> seen;
  std::map<int, Key32> digests = directory.digests;
  for (const auto& [id, adv] : directory.keys) {
    if (adv.client != id) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory entry ", id, " names client ", adv.client));
    }
    if (id < 0 || id >= s.params.num_clients) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory entry ", id, " is outside [0, ", s.params.num_clients, ")"));
    }
    if (!seen.insert(adv.cipher_public).second || !seen.insert(adv.mask_public).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory repeats a public key (at client ", id, ")"));
    }
    if (!digests.emplace(id, internal::EntryDigest(adv)).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory gives client ", id, " both in full and by digest"));
    }
  }
  for (const auto& [id, digest] : directory.digests) {
    if (id < 0 || id >= s.params.num_clients) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory entry ", id, " is outside [0, ", s.params.num_clients, ")"));
    }
  }
  // Kept in the session only once the directory is accepted: a refused one leaves it as it was.
  const Key32 session = internal::SessionHash(s.identity.context, s.params, digests);
  absl::StatusOr<NeighborGraph> graph = NeighborGraph::Make(
      s.params.num_clients, s.params.num_neighbors, internal::SessionGraphSeed(session));
  if (!graph.ok()) return graph.status();
  std::map<int, KeyAdvertisement> neighbor_keys;
  std::vector<int> recipients;
  for (int v : graph->Neighbors(s.id)) {
    if (digests.count(v) == 0) continue;  // did not advertise
    auto it = directory.keys.find(v);
    if (it == directory.keys.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "client ", s.id, ": the key directory gives its neighbour ", v,
          " only by digest; a neighbour's keys must be sent in full (or the server derived "
          "another session: other parameters or context, which give another graph)"));
    }
    if (s.identity.verifier != nullptr &&
        (it->second.identity.empty() || it->second.signature.empty())) {
      return absl::FailedPreconditionError(
          absl::StrCat("client ", s.id, " refuses the directory: neighbour ", v,
                       "'s keys are not signed, and this site checks its peers' identities"));
    }
    neighbor_keys[v] = it->second;
    recipients.push_back(v);
  }
  if (s.identity.verifier != nullptr) {
    const std::vector<absl::StatusOr<std::string>> verified =
        VerifyInParallel(recipients.size(), [&](size_t i) {
          const KeyAdvertisement& keys = neighbor_keys.at(recipients[i]);
          return s.identity.verifier->Verify(
              keys.identity, internal::AdvertisementMessage(s.identity.context, keys),
              keys.signature);
        });
    // One site, one neighbour: by the certificate's fingerprint (what the verifier returns),
    // not its PEM text, which a site could respell to pass for several.
    std::map<std::string, int> holder;
    if (s.identity.signer != nullptr) {
      if (absl::StatusOr<std::string> own_fp =
              CertificateFingerprint(s.identity.signer->identity());
          own_fp.ok()) {
        holder[*own_fp] = s.id;
      }
    }
    for (size_t i = 0; i < recipients.size(); ++i) {
      if (!verified[i].ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("client ", s.id, " refuses the directory: the keys of neighbour ",
                         recipients[i], " do not verify: ", verified[i].status().message()));
      }
      if (auto [it, fresh] = holder.emplace(*verified[i], recipients[i]); !fresh) {
        return absl::FailedPreconditionError(absl::StrCat(
            "client ", s.id, " refuses the directory: neighbour ", recipients[i],
            " signs with the certificate of ", it->second == s.id ? "this site" : "client ",
            it->second == s.id ? std::string() : absl::StrCat(it->second),
            " (one site may hold one place in a round)"));
      }
    }
  }
  if (static_cast<int>(recipients.size()) < s.params.threshold) {
    return absl::FailedPreconditionError(absl::StrCat(
        "client ", s.id, ": only ", recipients.size(), " of its ", graph->degree(),
        " neighbours advertised keys; at least threshold = ", s.params.threshold, " are needed"));
  }
  s.session = session;
  s.graph = *std::move(graph);
  s.digests = std::move(digests);
  s.neighbor_keys = std::move(neighbor_keys);
  if (absl::Status st = s.rng->Fill(s.self_seed); !st.ok()) return st;
  std::vector<uint64_t> xs;
  for (int v : recipients) xs.push_back(static_cast<uint64_t>(v) + 1);
  absl::StatusOr<std::vector<ShamirShare>> key_shares =
      ShamirSplit(s.mask_keys.private_key, s.params.threshold, xs, *s.rng);
  if (!key_shares.ok()) return key_shares.status();
  absl::StatusOr<std::vector<ShamirShare>> seed_shares =
      ShamirSplit(s.self_seed, s.params.threshold, xs, *s.rng);
  if (!seed_shares.ok()) return seed_shares.status();

  EncryptedShares out{.client = s.id, .ciphertexts = {}};
  for (size_t i = 0; i < recipients.size(); ++i) {
    const int v = recipients[i];
    absl::StatusOr<Key32> key = internal::ShareEncryptionKey(
        s.cipher_keys.private_key, s.neighbor_keys[v].cipher_public, s.session);
    if (!key.ok()) return key.status();
    const Bytes plain = internal::SerializeSharePlaintext({.from = s.id,
                                                           .to = v,
                                                           .mask_key_share = (*key_shares)[i],
                                                           .self_seed_share = (*seed_shares)[i]});
    absl::StatusOr<Bytes> sealed =
        AesGcmEncrypt(*key, plain, internal::ShareAad(s.id, v, s.session), *s.rng);
    Wipe(*key);
    if (!sealed.ok()) return sealed.status();
    out.ciphertexts[v] = *std::move(sealed);
  }
  s.stage = ClientStage::kMask;
  return out;
}

absl::StatusOr<MaskedInput> ClientSession::MaskUpdate(const ShareBundle& bundle,
                                                      std::span<const float> update,
                                                      uint32_t weight) {
  State& s = *state_;
  if (s.stage != ClientStage::kMask) return OutOfOrder("MaskUpdate", s.stage);
  if (update.size() != s.dimension) {
    return absl::InvalidArgumentError(
        absl::StrCat("update has ", update.size(), " values, the session expects ", s.dimension));
  }
  absl::StatusOr<std::vector<uint64_t>> encoding;
  if (UsesDdg(s.params)) {
    // The discrete Gaussian's rounding and noise draw from the session's source too; every
    // input weighs 1.
    RandomBits bits(*s.rng);
    encoding = EncodeDdg(s.params.ddg, update, bits);
  } else {
    encoding = EncodeWeightedUpdate(s.params, update, weight, *s.rng);
  }
  if (!encoding.ok()) return encoding.status();
  return MaskEncodedInput(bundle, *encoding);
}

absl::StatusOr<MaskedInput> ClientSession::MaskEncodedInput(const ShareBundle& bundle,
                                                            std::span<const uint64_t> encoding) {
  State& s = *state_;
  if (s.stage != ClientStage::kMask) return OutOfOrder("MaskEncodedInput", s.stage);
  if (encoding.size() != s.words) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoding has ", encoding.size(), " words, expected ", s.words));
  }
  const uint64_t mask = internal::ModulusMask(s.params.modulus_bits);
  for (size_t i = 0; i < encoding.size(); ++i) {
    if (encoding[i] > mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("encoding word ", i, " is >= 2^", s.params.modulus_bits));
    }
  }
  // Open every share addressed to this client; each must come from a neighbour in U1.
  std::map<int, internal::SharePlaintext> held;
  for (const auto& [from, sealed] : bundle.ciphertexts) {
    auto keys = s.neighbor_keys.find(from);
    if (keys == s.neighbor_keys.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("client ", s.id, " received shares from client ", from,
                       ", which is not a neighbour that advertised keys"));
    }
    absl::StatusOr<Key32> key = internal::ShareEncryptionKey(s.cipher_keys.private_key,
                                                             keys->second.cipher_public, s.session);
    if (!key.ok()) return key.status();
    absl::StatusOr<Bytes> plain =
        AesGcmDecrypt(*key, sealed, internal::ShareAad(from, s.id, s.session));
    Wipe(*key);
    if (!plain.ok()) {
      return absl::Status(plain.status().code(),
                          absl::StrCat("shares from client ", from, " to client ", s.id, ": ",
                                       plain.status().message()));
    }
    absl::StatusOr<internal::SharePlaintext> p = internal::ParseSharePlaintext(*plain);
    if (!p.ok()) return p.status();
    if (p->from != from || p->to != s.id ||
        p->mask_key_share.x != static_cast<uint64_t>(s.id) + 1 ||
        p->self_seed_share.x != static_cast<uint64_t>(s.id) + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shares relayed as from client ", from, " are not addressed from it to client ", s.id));
    }
    held[from] = *p;
  }
  if (static_cast<int>(held.size()) < s.params.threshold) {
    return absl::FailedPreconditionError(absl::StrCat("client ", s.id, ": only ", held.size(),
                                                      " neighbours shared their keys; at least "
                                                      "threshold = ",
                                                      s.params.threshold, " are needed"));
  }
  MaskedInput out{.client = s.id, .words = std::vector<uint64_t>(encoding.begin(), encoding.end())};
  internal::MaskAdder adder(s.params.modulus_bits);
  if (absl::Status st = adder.Add(s.self_seed, +1, out.words); !st.ok()) return st;
  for (const auto& [v, unused] : held) {
    absl::StatusOr<Key32> seed = internal::PairwiseMaskSeed(
        s.mask_keys.private_key, s.neighbor_keys[v].mask_public, s.session);
    if (!seed.ok()) return seed.status();
    absl::Status added = adder.Add(*seed, s.id < v ? +1 : -1, out.words);
    Wipe(*seed);
    if (!added.ok()) return added;
  }
  s.held = std::move(held);
  s.stage = ClientStage::kConsistency;
  return out;
}

// The ids of a list the server sent, each once and each a client that advertised keys (in U1);
// else FAILED_PRECONDITION: "client <id> <refusal> holds <v>, which ..." or "... twice".
absl::StatusOr<std::set<int>> ClientSession::IdsOfU1(const State& s, const std::vector<int>& ids,
                                                     const char* refusal) {
  std::set<int> out;
  for (int v : ids) {
    if (s.digests.count(v) == 0 || !out.insert(v).second) {
      return absl::FailedPreconditionError(absl::StrCat(
          "client ", s.id, " ", refusal, " holds ", v,
          s.digests.count(v) == 0 ? ", which did not advertise keys in this round" : " twice"));
    }
  }
  return out;
}

absl::StatusOr<SurvivorSignature> ClientSession::SignSurvivors(const SurvivorList& list) {
  State& s = *state_;
  if (s.stage != ClientStage::kConsistency) return OutOfOrder("SignSurvivors", s.stage);
  absl::StatusOr<std::set<int>> listed =
      IdsOfU1(s, list.survivors, "refuses to sign the survivors: the server's list");
  if (!listed.ok()) return listed.status();
  const std::set<int>& survivors = *listed;
  if (survivors.count(s.id) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id,
                     " refuses to sign the survivors: the server does not list it although it "
                     "sent its masked input"));
  }
  int surviving_neighbors = 0;
  for (int v : s.graph.Neighbors(s.id)) surviving_neighbors += survivors.count(v);
  if (surviving_neighbors < s.params.threshold) {
    // Bonawitz et al.'s check: with fewer than t survivors, this client's own seed cannot be
    // rebuilt and the round cannot succeed; revealing would only leak.
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id, " refuses to sign the survivors: only ", surviving_neighbors,
                     " of its neighbours are listed, ", s.params.threshold, " needed"));
  }
  s.signed_survivors.assign(survivors.begin(), survivors.end());
  SurvivorSignature out{.client = s.id, .signature = {}};
  if (s.identity.signer != nullptr) {
    absl::StatusOr<Bytes> signature =
        s.identity.signer->Sign(internal::SurvivorMessage(s.session, s.signed_survivors));
    if (!signature.ok()) return signature.status();
    out.signature = *std::move(signature);
  }
  s.stage = ClientStage::kUnmask;
  return out;
}

absl::StatusOr<UnmaskResponse> ClientSession::Unmask(const UnmaskRequest& request) {
  State& s = *state_;
  if (s.stage != ClientStage::kUnmask) return OutOfOrder("Unmask", s.stage);
  std::vector<int> listed = request.survivors;
  std::sort(listed.begin(), listed.end());
  if (listed != s.signed_survivors) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id,
                     " refuses to unmask: the survivors in the request are not the set it signed (",
                     listed.size(), " listed, ", s.signed_survivors.size(), " signed)"));
  }
  const std::set<int> survivors(listed.begin(), listed.end());
  absl::StatusOr<std::set<int>> dropped_ids =
      IdsOfU1(s, request.dropped, "refuses to unmask: the server's list of dropped clients");
  if (!dropped_ids.ok()) return dropped_ids.status();
  const std::set<int>& dropped = *dropped_ids;
  for (int v : dropped) {
    if (survivors.count(v) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("client ", s.id,
                       " refuses to unmask: the server asks for both the self-mask-seed "
                       "share and the mask-key share of client ",
                       v, ", which would reveal its input"));
    }
  }
  if (s.identity.verifier != nullptr) {
    // A majority of the round's sites (with the colluders' share) must have signed this very
    // set: no other set can then have one, so every honest site that reveals sees the same
    // survivors.
    const Bytes message = internal::SurvivorMessage(s.session, s.signed_survivors);
    // Of the n sites the round was set for, not of the directory's entries: a server that left
    // honest sites out of one group's directory would otherwise lower the count there.
    const int needed = ConsistencyThreshold(s.params.num_clients, s.params.corrupt_fraction);
    std::set<std::string> signers;
    std::string first_reason;
    auto note = [&first_reason](std::string reason) {
      if (first_reason.empty()) first_reason = std::move(reason);
    };
    std::vector<std::pair<int, const SurvivorEndorsement*>> candidates;
    for (const auto& [id, e] : request.signatures) {
      if (survivors.count(id) == 0 || e.keys.client != id) {
        note(absl::StrCat("client ", id, " is not a survivor"));
      } else if (internal::EntryDigest(e.keys) != s.digests.at(id)) {
        note(absl::StrCat("client ", id, "'s relayed keys are not those of the directory"));
      } else {
        candidates.emplace_back(id, &e);
      }
    }
    // A majority is all it takes: only as many signatures are verified as are still missing,
    // a batch at a time.
    for (size_t at = 0; static_cast<int>(signers.size()) < needed && at < candidates.size();) {
      const size_t batch =
          std::min(candidates.size() - at, static_cast<size_t>(needed) - signers.size());
      const std::vector<absl::StatusOr<std::string>> verified =
          VerifyInParallel(batch, [&](size_t i) {
            const SurvivorEndorsement& e = *candidates[at + i].second;
            return s.identity.verifier->Verify(e.keys.identity, message, e.signature);
          });
      for (size_t i = 0; i < batch; ++i) {
        if (verified[i].ok()) {
          signers.insert(*verified[i]);
        } else {
          note(absl::StrCat("client ", candidates[at + i].first, ": ",
                            verified[i].status().message()));
        }
      }
      at += batch;
    }
    if (static_cast<int>(signers.size()) < needed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "client ", s.id, " refuses to unmask: only ", signers.size(),
          " survivors' signatures over the survivor set it signed verify; ", needed, " of the ",
          s.params.num_clients, " sites of the round are needed (a majority with ",
          s.params.corrupt_fraction, " of them colluding)",
          first_reason.empty() ? "" : absl::StrCat("; ", first_reason)));
    }
  }
  UnmaskResponse out{.client = s.id, .self_seed_shares = {}, .mask_key_shares = {}};
  for (const auto& [v, plain] : s.held) {
    if (survivors.count(v) != 0) {
      out.self_seed_shares[v] = plain.self_seed_share;
    } else if (dropped.count(v) != 0) {
      out.mask_key_shares[v] = plain.mask_key_share;
    }
  }
  s.stage = ClientStage::kDone;
  s.WipeSecrets();  // answered once: nothing more is ever revealed, so nothing need be kept
  return out;
}

bool ClientSession::holds_secrets() const { return !state_->wiped; }

}  // namespace fl::secagg
