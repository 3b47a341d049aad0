#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/secagg_masking.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"

namespace fl::secagg {

enum class ServerStage { kAdvertise, kShare, kMask, kConsistency, kUnmask, kDone };

struct ServerSession::State {
  SecAggParams params;
  size_t dimension = 0;  // of the update
  size_t words = 0;      // of an input: EncodedWords(params, dimension)
  SessionIdentity identity;
  Key32 session{};               // the session's hash, from CloseAdvertiseKeys
  std::map<int, Key32> digests;  // of every entry of U1
  NeighborGraph graph;           // from the session's hash
  ServerStage stage = ServerStage::kAdvertise;
  std::map<int, KeyAdvertisement> u1;
  std::map<Key32, int> key_owner;  // every public key of U1, to the client that advertised it
  std::map<int, EncryptedShares> u2;
  std::set<int> u3;
  std::vector<uint64_t> accumulator;
  std::map<int, size_t> folded;  // words folded so far, by client still streaming (FoldMaskedWords)
  std::set<std::string> identities;  // of U1 (with a verifier: verified fingerprints)
  std::map<int, Bytes> signatures;   // U4: survivors' signatures over U3
  std::set<int> responders;          // unmask answers (a subset of U4)
  std::map<int, std::vector<ShamirShare>> seed_shares;  // by survivor
  std::map<int, std::vector<ShamirShare>> key_shares;   // by dropped client
  std::set<int> dropped;                                // U2 \ U3
  // Finish removed the masks (its checks may still have refused the result): the server has held
  // the survivors' sum in the clear.
  bool unmasked = false;
};

namespace {

const char* StageName(ServerStage stage) {
  static constexpr const char* kNames[] = {"advertise keys", "share keys", "masked input",
                                           "consistency",    "unmasking",  "done"};
  return kNames[static_cast<int>(stage)];
}

absl::Status CheckStage(const char* call, ServerStage at, ServerStage want) {
  if (at == want) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(call, " arrived while the round is at stage '",
                                                    StageName(at), "', not '", StageName(want),
                                                    "'"));
}

// A point of small order (the eight-torsion of Curve25519, e.g. u = 0 or 1, in any encoding)
// gives an all-zero X25519 output with every clamped scalar, which X25519Agree refuses.
bool IsSmallOrder(const Key32& public_key) {
  static constexpr Key32 kProbe = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  return X25519Agree(kProbe, public_key).status().code() == absl::StatusCode::kInvalidArgument;
}

absl::Status CheckClient(int client, int n) {
  if (client >= 0 && client < n) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("client id ", client, " is outside [0, ", n, ")"));
}

}  // namespace

ServerSession::ServerSession(std::unique_ptr<State> state) : state_(std::move(state)) {}
ServerSession::~ServerSession() = default;

absl::StatusOr<std::unique_ptr<ServerSession>> ServerSession::Create(const SecAggParams& params,
                                                                     size_t dimension,
                                                                     SessionIdentity identity) {
  if (absl::Status s = ValidateSecAggParams(params); !s.ok()) return s;
  if (dimension < 1) return absl::InvalidArgumentError("dimension must be at least 1");
  auto state = std::make_unique<State>();
  state->params = params;
  state->dimension = dimension;
  state->words = EncodedWords(params, dimension);
  identity.signer = nullptr;
  state->identity = std::move(identity);
  return std::unique_ptr<ServerSession>(new ServerSession(std::move(state)));
}

absl::Status ServerSession::ReceiveKeys(const KeyAdvertisement& m) {
  State& s = *state_;
  if (absl::Status st = CheckClient(m.client, s.params.num_clients); !st.ok()) return st;
  if (absl::Status st = CheckStage("AdvertiseKeys", s.stage, ServerStage::kAdvertise); !st.ok()) {
    return st;
  }
  if (s.u1.count(m.client) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("client ", m.client, " already advertised keys"));
  }
  // Keys its neighbours would refuse in the directory (and so all decline): refuse them here,
  // where only this client drops.
  if (m.cipher_public == m.mask_public) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client ", m.client, " advertised the same key to encrypt shares and to agree masks"));
  }
  for (const auto& [key, name] :
       {std::pair(m.cipher_public, "cipher_public"), std::pair(m.mask_public, "mask_public")}) {
    if (auto it = s.key_owner.find(key); it != s.key_owner.end()) {
      return absl::InvalidArgumentError(absl::StrCat("client ", m.client, " advertised a ", name,
                                                     " key that client ", it->second,
                                                     " already advertised"));
    }
    if (IsSmallOrder(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("client ", m.client, " advertised a ", name,
                       " key of small order (such as all zeros or u = 1): every secret agreed "
                       "with it is known"));
    }
  }
  std::string identity = m.identity;
  if (s.identity.verifier != nullptr) {
    if (m.identity.empty() || m.signature.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "client ", m.client,
          " advertised keys without signing them with its certificate; this federation's sites "
          "check each other's identities (update the client)"));
    }
    absl::StatusOr<std::string> who = s.identity.verifier->Verify(
        m.identity, internal::AdvertisementMessage(s.identity.context, m), m.signature);
    if (!who.ok()) {
      return absl::Status(who.status().code(),
                          absl::StrCat("the keys of client ", m.client,
                                       " do not verify: ", who.status().message()));
    }
    identity = *std::move(who);
  }
  if (!identity.empty() && s.identities.count(identity) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client ", m.client, " advertised keys with the identity of another client of the round"));
  }
  if (!identity.empty()) s.identities.insert(identity);
  s.key_owner[m.cipher_public] = m.client;
  s.key_owner[m.mask_public] = m.client;
  s.u1[m.client] = m;
  return absl::OkStatus();
}

absl::StatusOr<KeyDirectory> ServerSession::CloseAdvertiseKeys() {
  State& s = *state_;
  if (absl::Status st = CheckStage("CloseAdvertiseKeys", s.stage, ServerStage::kAdvertise);
      !st.ok()) {
    return st;
  }
  if (static_cast<int>(s.u1.size()) < s.params.threshold + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", s.u1.size(),
                     " clients advertised keys; secure aggregation needs at least "
                     "threshold + 1 = ",
                     s.params.threshold + 1));
  }
  for (const auto& [id, keys] : s.u1) s.digests[id] = internal::EntryDigest(keys);
  s.session = internal::SessionHash(s.identity.context, s.params, s.digests);
  absl::StatusOr<NeighborGraph> graph = NeighborGraph::Make(
      s.params.num_clients, s.params.num_neighbors, internal::SessionGraphSeed(s.session));
  if (!graph.ok()) return graph.status();
  s.graph = *std::move(graph);
  s.stage = ServerStage::kShare;
  return KeyDirectory{.keys = s.u1, .digests = {}};
}

KeyDirectory ServerSession::DirectoryFor(int client) const {
  const State& s = *state_;
  KeyDirectory out;
  if (s.stage == ServerStage::kAdvertise) return out;
  for (const auto& [id, digest] : s.digests) {
    if (id == client || s.graph.AreNeighbors(client, id)) {
      out.keys[id] = s.u1.at(id);
    } else {
      out.digests[id] = digest;
    }
  }
  return out;
}

const NeighborGraph& ServerSession::graph() const { return state_->graph; }

absl::Status ServerSession::ReceiveShares(const EncryptedShares& m) {
  State& s = *state_;
  if (absl::Status st = CheckClient(m.client, s.params.num_clients); !st.ok()) return st;
  if (absl::Status st = CheckStage("ShareKeys", s.stage, ServerStage::kShare); !st.ok()) return st;
  if (s.u1.count(m.client) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", m.client, " sent shares but did not advertise keys"));
  }
  if (s.u2.count(m.client) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("client ", m.client, " already sent its shares"));
  }
  for (const auto& [to, sealed] : m.ciphertexts) {
    if (!s.graph.AreNeighbors(m.client, to) || s.u1.count(to) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("client ", m.client,
                                                     " addressed shares to client ", to,
                                                     ", not a neighbour that advertised keys"));
    }
    if (sealed.size() != kSealedShareBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("client ", m.client, ": the ciphertext for client ", to, " is ",
                       sealed.size(), " bytes, not ", kSealedShareBytes));
    }
  }
  // A neighbour without its shares could not unmask the sender: every one must have them.
  for (int v : s.graph.Neighbors(m.client)) {
    if (s.u1.count(v) != 0 && m.ciphertexts.count(v) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("client ", m.client,
                                                     " sent no shares to client ", v,
                                                     ", a neighbour that advertised keys"));
    }
  }
  s.u2[m.client] = m;
  return absl::OkStatus();
}

absl::StatusOr<std::map<int, ShareBundle>> ServerSession::CloseShareKeys() {
  State& s = *state_;
  if (absl::Status st = CheckStage("CloseShareKeys", s.stage, ServerStage::kShare); !st.ok()) {
    return st;
  }
  std::map<int, ShareBundle> bundles;
  for (const auto& [from, shares] : s.u2) bundles[from];  // every client of U2 gets a bundle
  for (const auto& [from, shares] : s.u2) {
    for (const auto& [to, sealed] : shares.ciphertexts) {
      if (s.u2.count(to) != 0) bundles[to].ciphertexts[from] = sealed;
    }
  }
  // The ciphertexts are relayed now; only the list of senders is kept.
  for (auto& [from, shares] : s.u2) shares.ciphertexts.clear();
  s.accumulator.assign(s.words, 0);
  s.stage = ServerStage::kMask;
  return bundles;
}

absl::Status ServerSession::ReceiveMaskedInput(const MaskedInput& m) {
  if (m.words.size() != state_->words) {
    if (absl::Status st = CheckMaskedInputAllowed(m.client); !st.ok()) return st;
    return absl::InvalidArgumentError(absl::StrCat("masked input of client ", m.client, " has ",
                                                   m.words.size(), " words, expected ",
                                                   state_->words));
  }
  if (absl::Status st = FoldMaskedWords(m.client, 0, m.words); !st.ok()) return st;
  return CompleteMaskedInput(m.client);
}

absl::Status ServerSession::CheckMaskedInputAllowed(int client) const {
  const State& s = *state_;
  if (absl::Status st = CheckClient(client, s.params.num_clients); !st.ok()) return st;
  if (absl::Status st = CheckStage("MaskedInput", s.stage, ServerStage::kMask); !st.ok()) {
    return st;
  }
  if (s.u2.count(client) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", client, " sent a masked input but did not share its keys"));
  }
  if (s.u3.count(client) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("client ", client, " already sent its masked input"));
  }
  return absl::OkStatus();
}

absl::Status ServerSession::FoldMaskedWords(int client, size_t first_word,
                                            std::span<const uint64_t> words) {
  State& s = *state_;
  if (absl::Status st = CheckMaskedInputAllowed(client); !st.ok()) return st;
  size_t& folded = s.folded[client];
  if (first_word != folded || words.size() > s.words - folded) {
    return absl::InvalidArgumentError(absl::StrCat(
        "masked input of client ", client, ": words ", first_word, "..", first_word + words.size(),
        " do not follow the ", folded, " folded (of ", s.words, ")"));
  }
  const uint64_t mask = internal::ModulusMask(s.params.modulus_bits);
  for (uint64_t w : words) {
    if (w > mask) {
      return absl::InvalidArgumentError(absl::StrCat("masked input of client ", client,
                                                     " holds a word >= 2^", s.params.modulus_bits));
    }
  }
  uint64_t* acc = s.accumulator.data() + first_word;
  for (size_t i = 0; i < words.size(); ++i) acc[i] = (acc[i] + words[i]) & mask;
  folded += words.size();
  return absl::OkStatus();
}

absl::Status ServerSession::CompleteMaskedInput(int client) {
  State& s = *state_;
  if (absl::Status st = CheckMaskedInputAllowed(client); !st.ok()) return st;
  auto it = s.folded.find(client);
  const size_t folded = it == s.folded.end() ? 0 : it->second;
  if (folded != s.words) {
    return absl::InvalidArgumentError(absl::StrCat("masked input of client ", client, " has ",
                                                   folded, " words, expected ", s.words));
  }
  s.folded.erase(it);
  s.u3.insert(client);
  return absl::OkStatus();
}

absl::StatusOr<SurvivorList> ServerSession::CloseMaskedInput() {
  State& s = *state_;
  if (absl::Status st = CheckStage("CloseMaskedInput", s.stage, ServerStage::kMask); !st.ok()) {
    return st;
  }
  if (s.u3.empty()) {
    return absl::FailedPreconditionError("no client sent its masked input");
  }
  for (const auto& [id, unused] : s.u2) {
    if (s.u3.count(id) == 0) s.dropped.insert(id);
  }
  s.stage = ServerStage::kConsistency;
  return SurvivorList{.survivors = std::vector<int>(s.u3.begin(), s.u3.end())};
}

absl::Status ServerSession::ReceiveSurvivorSignature(const SurvivorSignature& m) {
  State& s = *state_;
  if (absl::Status st = CheckClient(m.client, s.params.num_clients); !st.ok()) return st;
  if (absl::Status st = CheckStage("SignSurvivors", s.stage, ServerStage::kConsistency); !st.ok()) {
    return st;
  }
  if (s.u3.count(m.client) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", m.client, " signed the survivors but is not one"));
  }
  if (s.signatures.count(m.client) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("client ", m.client, " already signed the survivors"));
  }
  if (s.identity.verifier != nullptr) {
    const std::vector<int> survivors(s.u3.begin(), s.u3.end());
    absl::StatusOr<std::string> who = s.identity.verifier->Verify(
        s.u1.at(m.client).identity, internal::SurvivorMessage(s.session, survivors), m.signature);
    if (!who.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat("the signature of client ", m.client,
                       " over the survivors does not verify: ", who.status().message()));
    }
  }
  s.signatures[m.client] = m.signature;
  return absl::OkStatus();
}

absl::StatusOr<UnmaskRequest> ServerSession::CloseConsistency() {
  State& s = *state_;
  if (absl::Status st = CheckStage("CloseConsistency", s.stage, ServerStage::kConsistency);
      !st.ok()) {
    return st;
  }
  // Of the n sites the round was set for (bound in the session's hash), whoever advertised.
  const int needed = ConsistencyThreshold(s.params.num_clients, s.params.corrupt_fraction);
  if (static_cast<int>(s.signatures.size()) < needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "only ", s.signatures.size(), " survivors signed the survivor set; ", needed, " of the ",
        s.params.num_clients, " sites of the round (a majority with ", s.params.corrupt_fraction,
        " of them colluding) must sign it before any reveals a share"));
  }
  UnmaskRequest request;
  request.survivors.assign(s.u3.begin(), s.u3.end());
  request.dropped.assign(s.dropped.begin(), s.dropped.end());
  for (const auto& [id, signature] : s.signatures) {
    request.signatures[id] = SurvivorEndorsement{.keys = s.u1.at(id), .signature = signature};
  }
  s.stage = ServerStage::kUnmask;
  return request;
}

absl::Status ServerSession::ReceiveUnmask(const UnmaskResponse& m) {
  State& s = *state_;
  if (absl::Status st = CheckClient(m.client, s.params.num_clients); !st.ok()) return st;
  if (absl::Status st = CheckStage("Unmask", s.stage, ServerStage::kUnmask); !st.ok()) return st;
  if (s.signatures.count(m.client) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "client ", m.client, " answered the unmasking but did not sign the survivor set"));
  }
  if (s.responders.count(m.client) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("client ", m.client, " already answered"));
  }
  const uint64_t point = static_cast<uint64_t>(m.client) + 1;
  auto check = [&](int owner, const ShamirShare& share, const std::set<int>& role,
                   const char* what) -> absl::Status {
    if (role.count(owner) == 0 || !s.graph.AreNeighbors(m.client, owner)) {
      return absl::InvalidArgumentError(absl::StrCat("client ", m.client, " revealed a ", what,
                                                     " share of client ", owner,
                                                     ", which the request did not ask for"));
    }
    if (share.x != point) {
      return absl::InvalidArgumentError(absl::StrCat("client ", m.client,
                                                     " revealed a share at "
                                                     "point ",
                                                     share.x, ", not its own ", point));
    }
    for (uint64_t y : share.y) {
      if (y >= kShamirPrime) {
        return absl::InvalidArgumentError(
            absl::StrCat("client ", m.client, " revealed a ", what, " share of client ", owner,
                         " with a value outside the field (", y, " >= 2^61 - 1)"));
      }
    }
    return absl::OkStatus();
  };
  for (const auto& [owner, share] : m.self_seed_shares) {
    if (absl::Status st = check(owner, share, s.u3, "self-mask-seed"); !st.ok()) return st;
  }
  for (const auto& [owner, share] : m.mask_key_shares) {
    if (absl::Status st = check(owner, share, s.dropped, "mask-key"); !st.ok()) return st;
  }
  for (const auto& [owner, share] : m.self_seed_shares) s.seed_shares[owner].push_back(share);
  for (const auto& [owner, share] : m.mask_key_shares) s.key_shares[owner].push_back(share);
  s.responders.insert(m.client);
  return absl::OkStatus();
}

absl::StatusOr<AggregateResult> ServerSession::Finish() {
  State& s = *state_;
  if (absl::Status st = CheckStage("Finish", s.stage, ServerStage::kUnmask); !st.ok()) return st;
  const int t = s.params.threshold;
  // Check every needed secret has t shares before spending time on the PRGs.
  for (int v : s.dropped) {
    const size_t got = s.key_shares[v].size();
    if (got < static_cast<size_t>(t)) {
      return absl::FailedPreconditionError(
          absl::StrCat("client ", v, " dropped after sharing: ", got,
                       " of its neighbours revealed shares of its mask key, ", t,
                       " needed; the round cannot be unmasked"));
    }
  }
  for (int u : s.u3) {
    const size_t got = s.seed_shares[u].size();
    if (got < static_cast<size_t>(t)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "client ", u, ": ", got, " of its neighbours revealed shares of its self-mask seed, ", t,
          " needed; the round cannot be unmasked"));
    }
  }
  internal::MaskAdder adder(s.params.modulus_bits);
  // A copy: on failure the session keeps its accumulator, so late answers can still arrive
  // and Finish can be called again.
  std::vector<uint64_t> sum = s.accumulator;
  for (int u : s.u3) {
    absl::StatusOr<Key32> seed = ShamirReconstructChecked(s.seed_shares[u], t);
    if (!seed.ok()) {
      return absl::DataLossError(absl::StrCat("the self-mask seed of client ", u,
                                              " cannot be rebuilt: ", seed.status().message()));
    }
    absl::Status added = adder.Add(*seed, -1, sum);
    Wipe(*seed);  // the rebuilt seed is used once
    if (!added.ok()) return added;
  }
  for (int v : s.dropped) {
    const Key32& advertised = s.u1[v].mask_public;
    absl::StatusOr<Key32> key =
        ShamirReconstructChecked(s.key_shares[v], t, [&advertised](const Key32& candidate) {
          absl::StatusOr<Key32> pub = X25519PublicFromPrivate(candidate);
          return pub.ok() && *pub == advertised;
        });
    if (!key.ok()) {
      return absl::DataLossError(absl::StrCat(
          "the mask key reconstructed for client ", v,
          " does not match its advertised public key (a neighbour revealed a wrong share): ",
          key.status().message()));
    }
    // Survivor u added +PRG(s_uv) when u < v and -PRG(s_uv) otherwise: take it back out.
    for (int u : s.graph.Neighbors(v)) {
      if (s.u3.count(u) == 0) continue;
      absl::StatusOr<Key32> seed = internal::PairwiseMaskSeed(*key, s.u1[u].mask_public, s.session);
      if (!seed.ok()) {
        Wipe(*key);
        return seed.status();
      }
      absl::Status added = adder.Add(*seed, u < v ? -1 : +1, sum);
      Wipe(*seed);
      if (!added.ok()) {
        Wipe(*key);
        return added;
      }
    }
    Wipe(*key);  // the dropped client's rebuilt mask key, used for its neighbours' masks only
  }
  s.unmasked = true;
  // A wrong seed (rebuilt from wrong shares no other share could refute) or a wrong input leaves
  // a uniform sum: its weight and mean fall outside what honest inputs give, all but surely. No
  // message names a value of the sum: it is the survivors' and goes no further than this.
  const uint64_t weight = sum.back();
  const uint64_t survivors = s.u3.size();
  // A discrete Gaussian input weighs exactly 1.
  const uint64_t max_weight = UsesDdg(s.params) ? 1 : s.params.max_weight;
  if (weight < survivors || weight > survivors * max_weight) {
    return absl::DataLossError(absl::StrCat(
        "the unmasked total weight is outside [", survivors, ", ", survivors * max_weight,
        "]: a client revealed a wrong share or masked a wrong input"));
  }
  AggregateResult result;
  result.sum = std::move(sum);
  result.survivors.assign(s.u3.begin(), s.u3.end());
  if (UsesDdg(s.params)) {
    // Noise has no range to check; the weight above is the check a wrong share fails.
    absl::StatusOr<std::vector<float>> mean = DecodeDdgMean(s.params.ddg, result.sum, s.dimension);
    if (!mean.ok()) return mean.status();
    result.mean = *std::move(mean);
    s.stage = ServerStage::kDone;
    return result;
  }
  absl::StatusOr<std::vector<float>> mean = DecodeWeightedMean(s.params, result.sum);
  if (!mean.ok()) return mean.status();
  // Honest means lie in [-c, c]; a step of slack, and the float's rounding (of c: 2^-23 c).
  const double c = s.params.clip_range;
  const double limit = c + QuantizationErrorBound(c, s.params.quantization_bits);
  for (size_t i = 0; i < mean->size(); ++i) {
    if (!(std::abs(static_cast<double>((*mean)[i])) <= limit)) {
      return absl::DataLossError(
          absl::StrCat("the unmasked sum is out of range at coordinate ", i, " (outside +-", limit,
                       "): a client revealed a wrong share or masked a wrong input"));
    }
  }
  result.mean = *std::move(mean);
  s.stage = ServerStage::kDone;
  return result;
}

std::span<const uint64_t> ServerSession::accumulator() const { return state_->accumulator; }

bool ServerSession::unmasked() const { return state_->unmasked; }

}  // namespace fl::secagg
