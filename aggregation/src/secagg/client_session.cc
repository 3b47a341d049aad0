#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/secagg_masking.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"

namespace fl::secagg {

enum class ClientStage { kAdvertise, kShare, kMask, kUnmask, kDone };

struct ClientSession::State {
  SecAggParams params;
  int id = -1;
  size_t dimension = 0;
  std::unique_ptr<RandomSource> rng;
  NeighborGraph graph;
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

absl::Status OutOfOrder(const char* call, ClientStage stage) {
  static constexpr const char* kNames[] = {"advertise keys", "share keys", "masked input",
                                           "unmasking", "done"};
  return absl::FailedPreconditionError(
      absl::StrCat(call, " called out of order: the client session is at stage '",
                   kNames[static_cast<int>(stage)], "'"));
}

}  // namespace

ClientSession::ClientSession(std::unique_ptr<State> state) : state_(std::move(state)) {}
ClientSession::~ClientSession() = default;

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Create(
    const SecAggParams& params, int client, size_t dimension, std::unique_ptr<RandomSource> rng) {
  if (absl::Status s = ValidateSecAggParams(params); !s.ok()) return s;
  if (client < 0 || client >= params.num_clients) {
    return absl::InvalidArgumentError(
        absl::StrCat("client id ", client, " is outside [0, ", params.num_clients, ")"));
  }
  if (dimension < 1) return absl::InvalidArgumentError("dimension must be at least 1");
  if (!rng) return absl::InvalidArgumentError("a RandomSource is required");
  absl::StatusOr<NeighborGraph> graph =
      NeighborGraph::Make(params.num_clients, params.num_neighbors, params.graph_seed);
  if (!graph.ok()) return graph.status();
  auto state = std::make_unique<State>();
  state->params = params;
  state->id = client;
  state->dimension = dimension;
  state->rng = std::move(rng);
  state->graph = *std::move(graph);
  return std::unique_ptr<ClientSession>(new ClientSession(std::move(state)));
}

absl::StatusOr<KeyAdvertisement> ClientSession::AdvertiseKeys() {
  State& s = *state_;
  if (s.stage != ClientStage::kAdvertise) return OutOfOrder("AdvertiseKeys", s.stage);
  absl::StatusOr<X25519KeyPair> c = GenerateX25519KeyPair(*s.rng);
  if (!c.ok()) return c.status();
  absl::StatusOr<X25519KeyPair> m = GenerateX25519KeyPair(*s.rng);
  if (!m.ok()) return m.status();
  s.cipher_keys = *c;
  s.mask_keys = *m;
  s.stage = ClientStage::kShare;
  return KeyAdvertisement{
      .client = s.id, .cipher_public = c->public_key, .mask_public = m->public_key};
}

absl::StatusOr<EncryptedShares> ClientSession::ShareKeys(const KeyDirectory& directory) {
  State& s = *state_;
  if (s.stage != ClientStage::kShare) return OutOfOrder("ShareKeys", s.stage);
  auto own = directory.keys.find(s.id);
  if (own == directory.keys.end() || own->second.cipher_public != s.cipher_keys.public_key ||
      own->second.mask_public != s.mask_keys.public_key) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id, ": the key directory does not hold the keys it advertised"));
  }
  std::set<Key32> seen;
  for (const auto& [id, adv] : directory.keys) {
    if (adv.client != id) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory entry ", id, " names client ", adv.client));
    }
    if (!seen.insert(adv.cipher_public).second || !seen.insert(adv.mask_public).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("key directory repeats a public key (at client ", id, ")"));
    }
  }
  std::vector<int> recipients;
  for (int v : s.graph.Neighbors(s.id)) {
    auto it = directory.keys.find(v);
    if (it == directory.keys.end()) continue;
    s.neighbor_keys[v] = it->second;
    recipients.push_back(v);
  }
  if (static_cast<int>(recipients.size()) < s.params.threshold) {
    return absl::FailedPreconditionError(absl::StrCat(
        "client ", s.id, ": only ", recipients.size(), " of its ", s.graph.degree(),
        " neighbours advertised keys; at least threshold = ", s.params.threshold, " are needed"));
  }
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
    absl::StatusOr<Key32> key =
        internal::ShareEncryptionKey(s.cipher_keys.private_key, s.neighbor_keys[v].cipher_public);
    if (!key.ok()) return key.status();
    const Bytes plain = internal::SerializeSharePlaintext({.from = s.id,
                                                           .to = v,
                                                           .mask_key_share = (*key_shares)[i],
                                                           .self_seed_share = (*seed_shares)[i]});
    absl::StatusOr<Bytes> sealed = AesGcmEncrypt(*key, plain, internal::ShareAad(s.id, v), *s.rng);
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
  absl::StatusOr<std::vector<uint64_t>> encoding =
      EncodeWeightedUpdate(s.params, update, weight, *s.rng);
  if (!encoding.ok()) return encoding.status();
  return MaskEncodedInput(bundle, *encoding);
}

absl::StatusOr<MaskedInput> ClientSession::MaskEncodedInput(const ShareBundle& bundle,
                                                            std::span<const uint64_t> encoding) {
  State& s = *state_;
  if (s.stage != ClientStage::kMask) return OutOfOrder("MaskEncodedInput", s.stage);
  if (encoding.size() != s.dimension + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "encoding has ", encoding.size(), " words, expected dimension + 1 = ", s.dimension + 1));
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
    absl::StatusOr<Key32> key =
        internal::ShareEncryptionKey(s.cipher_keys.private_key, keys->second.cipher_public);
    if (!key.ok()) return key.status();
    absl::StatusOr<Bytes> plain = AesGcmDecrypt(*key, sealed, internal::ShareAad(from, s.id));
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
    absl::StatusOr<Key32> seed =
        internal::PairwiseMaskSeed(s.mask_keys.private_key, s.neighbor_keys[v].mask_public);
    if (!seed.ok()) return seed.status();
    if (absl::Status st = adder.Add(*seed, s.id < v ? +1 : -1, out.words); !st.ok()) return st;
  }
  s.held = std::move(held);
  s.stage = ClientStage::kUnmask;
  return out;
}

absl::StatusOr<UnmaskResponse> ClientSession::Unmask(const UnmaskRequest& request) {
  State& s = *state_;
  if (s.stage != ClientStage::kUnmask) return OutOfOrder("Unmask", s.stage);
  // Each list names clients of this round, each once: a list padded with ids that are no client
  // would make a sum look larger than it is to a site that counts it.
  for (const std::vector<int>* list : {&request.survivors, &request.dropped}) {
    std::set<int> seen;
    for (int v : *list) {
      const bool outside = v < 0 || v >= s.params.num_clients;
      if (outside || !seen.insert(v).second) {
        return absl::FailedPreconditionError(
            absl::StrCat("client ", s.id, " refuses to unmask: the server's list of ",
                         list == &request.survivors ? "survivors" : "dropped clients", " holds ", v,
                         outside ? absl::StrCat(", which is not a client of this round (ids 0..",
                                                s.params.num_clients - 1, ")")
                                 : " twice"));
      }
    }
  }
  const std::set<int> survivors(request.survivors.begin(), request.survivors.end());
  const std::set<int> dropped(request.dropped.begin(), request.dropped.end());
  for (int v : dropped) {
    if (survivors.count(v) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("client ", s.id,
                       " refuses to unmask: the server asks for both the self-mask-seed "
                       "share and the mask-key share of client ",
                       v, ", which would reveal its input"));
    }
  }
  if (dropped.count(s.id) != 0 || survivors.count(s.id) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id,
                     " refuses to unmask: the server does not list it as a survivor although "
                     "it sent its masked input"));
  }
  int surviving_neighbors = 0;
  for (int v : s.graph.Neighbors(s.id)) surviving_neighbors += survivors.count(v);
  if (surviving_neighbors < s.params.threshold) {
    // Bonawitz et al.'s check: with fewer than t survivors, this client's own seed cannot be
    // rebuilt and the round cannot succeed; revealing would only leak.
    return absl::FailedPreconditionError(
        absl::StrCat("client ", s.id, " refuses to unmask: only ", surviving_neighbors,
                     " of its neighbours are listed as survivors"));
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
