// The SecAgg+ protocol (Bell et al. 2020) with the double masking of Bonawitz et al. 2017 and
// the consistency check that makes it hold against a malicious server (Bonawitz et al., section
// 6), as two in-process state machines that exchange the message structs below. No network: the
// server session relays what a transport hands it; a later layer carries the structs over gRPC.
//
// One round, for clients 0..n-1:
//   1. AdvertiseKeys: each client sends two X25519 public keys (one to encrypt shares, one to
//      agree pairwise masks), signed with its identity (identity.h) over the session's context.
//      The server returns the directory of the keys it received (U1). The session's hash covers
//      the context, the parameters and every entry of U1; the neighbour graph's seed comes from
//      it, so the server cannot set the graph outright (it can still try many directories, with
//      colluders' fresh keys or another choice of U1, until one suits it: see the design notes).
//   2. ShareKeys: each client checks its neighbours' signatures, splits its mask private key and
//      a fresh self-mask seed into t-of-k Shamir shares, one per neighbour in U1, each encrypted
//      with AES-256-GCM under HKDF(X25519(own cipher key, neighbour's cipher key), session). The
//      server forwards to each client the ciphertexts addressed to it; who sent them is U2.
//   3. MaskedInput: each client sends y = encoding + PRG(self seed) + sum over neighbours v in U2
//      of +PRG(s_uv) (u < v) or -PRG(s_uv) (u > v), modulo 2^m, with s_uv =
//      HKDF(X25519(own mask key, v's mask key), session). The server adds each y into one
//      accumulator (memory O(model), not O(clients x model)); who sent is U3.
//   4. Consistency: the server sends U3 to its clients; each signs (session, U3) once. Those who
//      signed are U4; at least T = ConsistencyThreshold(n, gamma) of them are needed.
//   5. Unmasking: the server tells the clients of U4 the survivors (U3), who dropped after sharing
//      (U2 \ U3), and relays the signatures of U4. Each client checks that T distinct sites (by
//      certificate) signed the very survivor set it signed, T a majority of the round's n sites
//      even if floor(gamma n) of them collude with the server and sign every set: honest clients
//      sign once, so within one session no other set can gather T, and every honest client that
//      reveals anything sees the same U3. Then it reveals, per neighbour, the share of its
//      self-mask seed (survivor) or of its mask key (dropped), never both. The server
//      reconstructs from t shares, removes the masks and obtains the exact sum of the survivors'
//      encodings. (Colluding neighbours reveal what they hold anyway: a client with t of them
//      is exposed whatever the others do, which t and k must make unlikely.)
//
// A client refuses (FAILED_PRECONDITION) to reveal both shares of one peer, to sign or unmask
// for a set other than the one it signed, or to answer twice. The server fails the round
// (FAILED_PRECONDITION naming the client and the counts) when fewer than t neighbours of a client
// whose mask must be removed answered. Neither class is thread-safe.
#ifndef FL_AGGREGATION_SECAGG_PROTOCOL_H_
#define FL_AGGREGATION_SECAGG_PROTOCOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/shamir.h"

namespace fl::secagg {

// What a session is bound to, and how its clients prove who they are.
struct SessionIdentity {
  // Public bytes both ends know before the round (the run, the round, the attempt): part of every
  // signature, of the session's hash and so of every derived key; nothing made for another
  // session is accepted in this one.
  Bytes context;
  // Client: signs its key advertisement and the survivor set (none: it signs nothing, and a peer
  // that verifies refuses it).
  std::shared_ptr<const IdentitySigner> signer;
  // Client: checks its neighbours' advertisements and the survivors' signatures; without one it
  // trusts the server (semi-honest). Server: checks both as they arrive, so that one client's bad
  // signature drops that client instead of failing the round at its peers.
  std::shared_ptr<const IdentityVerifier> verifier;
};

// The context both ends of the federation's rounds bind a session to: the run, the round and the
// attempt, which the round's task id names in its first two parts ("r3.a1.<client>").
Bytes SessionContext(int64_t run_id, int32_t round, std::string_view task_id);

// Stage 1, client -> server.
struct KeyAdvertisement {
  int client = -1;
  Key32 cipher_public{};  // encrypts the shares
  Key32 mask_public{};    // agrees the pairwise masks
  std::string identity;   // the signer's certificate (PEM); empty when the client has none
  Bytes signature;        // by the identity over the context, the id and both keys
};

// Stage 1, server -> every client of U1: the entries of U1, by client id: the client's own and its
// neighbours' in full (`keys`), every other one by its digest (`digests`, SHA-256 over the id, the
// keys and the identity), from which the session's hash is computed without sending every
// certificate to everyone. ServerSession::DirectoryFor gives a client's.
struct KeyDirectory {
  std::map<int, KeyAdvertisement> keys;
  std::map<int, Key32> digests;
};

// The size of one sealed pair of shares: nonce, the plaintext (sender and recipient ids, 4 bytes
// each, then the mask-key share and the self-seed share), tag.
inline constexpr size_t kSealedShareBytes =
    kAesGcmNonceBytes + 8 + 2 * kShamirShareBytes + kAesGcmTagBytes;

// Stage 2, client -> server: one AES-256-GCM ciphertext per neighbour in U1, by recipient.
struct EncryptedShares {
  int client = -1;
  std::map<int, Bytes> ciphertexts;
};

// Stage 2, server -> one client: the ciphertexts addressed to it, by sender (the sender's
// neighbours in U2).
struct ShareBundle {
  std::map<int, Bytes> ciphertexts;
};

// Stage 3, client -> server: the masked encoding (dimension + 1 words, each < 2^m).
struct MaskedInput {
  int client = -1;
  std::vector<uint64_t> words;
};

// Stage 4, server -> every client of U3: the survivor set, ascending.
struct SurvivorList {
  std::vector<int> survivors;
};

// Stage 4, client -> server: its signature over (session, survivors); empty without a signer.
struct SurvivorSignature {
  int client = -1;
  Bytes signature;
};

// One signer of the survivor set, as relayed to the others: its directory entry (which a client
// that holds only the entry's digest checks against it) and its signature.
struct SurvivorEndorsement {
  KeyAdvertisement keys;
  Bytes signature;
};

// Stage 5, server -> every client of U4.
struct UnmaskRequest {
  std::vector<int> survivors;                     // U3: their self masks are removed
  std::vector<int> dropped;                       // U2 \ U3: their pairwise masks are removed
  std::map<int, SurvivorEndorsement> signatures;  // U4's, by signer
};

// Stage 5, client -> server: shares of neighbours' secrets, by the neighbour they belong to.
struct UnmaskResponse {
  int client = -1;
  std::map<int, ShamirShare> self_seed_shares;  // of survivors
  std::map<int, ShamirShare> mask_key_shares;   // of dropped clients
};

// What the server learns.
struct AggregateResult {
  std::vector<uint64_t> sum;   // sum of the survivors' encodings mod 2^m; last word: total weight
  std::vector<float> mean;     // the dequantized weighted mean (dimension values)
  std::vector<int> survivors;  // U3, ascending
};

class ClientSession {
 public:
  // INVALID_ARGUMENT for parameters ValidateSecAggParams refuses, a client id outside [0, n),
  // or a dimension < 1. `rng` supplies every secret (keys, seeds, nonces, share polynomials).
  static absl::StatusOr<std::unique_ptr<ClientSession>> Create(const SecAggParams& params,
                                                               int client, size_t dimension,
                                                               std::unique_ptr<RandomSource> rng,
                                                               SessionIdentity identity = {});
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // Stage 1: fresh key pairs, signed when the session has a signer. FAILED_PRECONDITION when
  // called out of order (for all stages); what the signer returns when it fails.
  absl::StatusOr<KeyAdvertisement> AdvertiseKeys();

  // Stage 2. FAILED_PRECONDITION when the directory lacks this client's own keys as advertised,
  // holds one public key or (with a verifier) one identity for two clients, gives a neighbour
  // only by its digest, names an id twice or outside [0, n), or holds fewer than t of this
  // client's neighbours; with a verifier, when a neighbour's advertisement is unsigned or its
  // signature or certificate does not verify (the verifier's reason).
  absl::StatusOr<EncryptedShares> ShareKeys(const KeyDirectory& directory);

  // Stage 3 with an encoding already made by EncodeWeightedUpdate (dimension + 1 words).
  // INVALID_ARGUMENT when the size is wrong or a word is >= 2^m, or a ciphertext comes from a
  // non-neighbour or does not decrypt (DATA_LOSS); FAILED_PRECONDITION when fewer than t
  // neighbours sent shares.
  absl::StatusOr<MaskedInput> MaskEncodedInput(const ShareBundle& bundle,
                                               std::span<const uint64_t> encoding);
  // Stage 3 from the float update: EncodeWeightedUpdate with this session's randomness, then
  // MaskEncodedInput.
  absl::StatusOr<MaskedInput> MaskUpdate(const ShareBundle& bundle, std::span<const float> update,
                                         uint32_t weight);

  // Stage 4: signs the survivor set, once. FAILED_PRECONDITION when the list names an id outside
  // U1 or one id twice, does not list this client, or lists fewer than t of its neighbours (its
  // own seed could not be rebuilt: revealing would only leak).
  absl::StatusOr<SurvivorSignature> SignSurvivors(const SurvivorList& list);

  // Stage 5. FAILED_PRECONDITION when the survivors differ from the set this client signed, when
  // a peer is listed both as survivor and as dropped ("reveal both shares"), when a dropped id is
  // outside U1 or repeated, or (with a verifier) when fewer than ConsistencyThreshold(|U1|,
  // corrupt_fraction) distinct survivors' signatures over this set verify (a signature that does
  // not is not counted; the message gives the count and the first reason); or when it already
  // answered.
  absl::StatusOr<UnmaskResponse> Unmask(const UnmaskRequest& request);

  // Whether the session still holds its private keys, self-mask seed and the shares it was sent:
  // until its unmasking answer is made. They are overwritten then (and when the session is
  // destroyed), not left in freed memory.
  bool holds_secrets() const;

 private:
  struct State;
  static absl::StatusOr<std::set<int>> IdsOfU1(const State& s, const std::vector<int>& ids,
                                               const char* refusal);
  explicit ClientSession(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class ServerSession {
 public:
  // INVALID_ARGUMENT for parameters ValidateSecAggParams refuses or a dimension < 1. Only the
  // identity's context and verifier are used.
  static absl::StatusOr<std::unique_ptr<ServerSession>> Create(const SecAggParams& params,
                                                               size_t dimension,
                                                               SessionIdentity identity = {});
  ~ServerSession();
  ServerSession(const ServerSession&) = delete;
  ServerSession& operator=(const ServerSession&) = delete;

  // Every Receive* refuses: a client id outside [0, n) (INVALID_ARGUMENT), a message for a stage
  // that is closed or not yet open (FAILED_PRECONDITION), a second message from one client
  // (ALREADY_EXISTS), a client that dropped out at an earlier stage (FAILED_PRECONDITION). A
  // refused message leaves the session as it was, so the caller can drop just that client.
  //
  // Also INVALID_ARGUMENT naming the client for keys its neighbours would refuse: the same key
  // twice, a key another client already advertised, or a point of small order (all zeros, u = 1,
  // ...: every shared secret with it is known); with a verifier, an advertisement without an
  // identity, with the identity of another client, or whose signature or certificate does not
  // verify (the verifier's code and reason).
  absl::Status ReceiveKeys(const KeyAdvertisement& message);
  // Closes stage 1: the whole directory (every entry in full), the session's hash and its graph
  // fixed. FAILED_PRECONDITION when fewer than t + 1 clients advertised.
  absl::StatusOr<KeyDirectory> CloseAdvertiseKeys();
  // After stage 1: what `client` is sent, its own entry and its neighbours' in full, the others'
  // digests. The graph after stage 1 (empty before).
  KeyDirectory DirectoryFor(int client) const;
  const NeighborGraph& graph() const;

  // INVALID_ARGUMENT unless the message holds exactly one ciphertext for every neighbour of the
  // sender in U1 and none for anyone else, each of kSealedShareBytes.
  absl::Status ReceiveShares(const EncryptedShares& message);
  // Closes stage 2: the bundle of every client of U2, by client.
  absl::StatusOr<std::map<int, ShareBundle>> CloseShareKeys();

  // INVALID_ARGUMENT when the size is not dimension + 1 or a word is >= 2^m.
  absl::Status ReceiveMaskedInput(const MaskedInput& message);
  // The same in pieces, for an input that streams in: words [first_word, first_word + size) of
  // `client`'s input are added to the accumulator (refused like ReceiveMaskedInput, and
  // INVALID_ARGUMENT when a piece does not start where the previous one ended or runs past
  // dimension + 1 words). CompleteMaskedInput then counts the client in U3 (INVALID_ARGUMENT when
  // fewer than dimension + 1 words were folded). A piece refused midway leaves the accumulator
  // as it was; an input abandoned after some pieces leaves them in it, so callers fold only an
  // input they have verified whole. Sums modulo 2^m: the order of clients does not matter.
  absl::Status FoldMaskedWords(int client, size_t first_word, std::span<const uint64_t> words);
  absl::Status CompleteMaskedInput(int client);
  // Closes stage 3: the survivor set to sign. FAILED_PRECONDITION when no client sent its masked
  // input.
  absl::StatusOr<SurvivorList> CloseMaskedInput();

  // A survivor's signature (refused like the others; FAILED_PRECONDITION for a client not in U3).
  // With a verifier, what it refuses: UNAUTHENTICATED for a signature that does not verify.
  absl::Status ReceiveSurvivorSignature(const SurvivorSignature& message);
  // Closes stage 4: the unmask request for the signers. FAILED_PRECONDITION naming the counts when
  // fewer than ConsistencyThreshold(|U1|, corrupt_fraction) signed.
  absl::StatusOr<UnmaskRequest> CloseConsistency();

  // From a client of U4 (FAILED_PRECONDITION for one that did not sign). INVALID_ARGUMENT naming
  // the client and the owner when a share belongs to a client the request did not list in that
  // role, to a non-neighbour, is not at the responder's point, or holds a value outside the
  // field (y >= kShamirPrime).
  absl::Status ReceiveUnmask(const UnmaskResponse& message);
  // Reconstructs and removes the masks. FAILED_PRECONDITION ("client 7: 4 of its neighbours
  // revealed shares of its self-mask seed, 6 needed") when a needed secret has fewer than t
  // shares. Wrong shares (ShamirReconstructChecked): a secret with more than t shares is taken
  // only when the others confirm it, a mask key only when it matches the advertised public key;
  // DATA_LOSS naming the client whose secret cannot be rebuilt otherwise. DATA_LOSS too when the
  // unmasked total weight is outside [|U3|, |U3| * max_weight] or a coordinate of the mean is
  // outside [-c - step, c + step] (a wrong share or input that no check above caught): never a
  // random model; the message names no value of the sum. After a failure before the masks were
  // removed (too few shares, a secret that cannot be rebuilt) the session stays at the unmasking
  // stage: more answers may still be received and Finish called again. A failure after
  // (unmasked() is then true) means the server has seen the survivors' sum: the caller must not
  // run the round again over other sites from the same model, where two sums could be
  // subtracted.
  absl::StatusOr<AggregateResult> Finish();
  // Whether Finish removed the masks, whether or not its checks then took the sum.
  bool unmasked() const;

  // The masked inputs' running sum (what the server holds before unmasking).
  std::span<const uint64_t> accumulator() const;

 private:
  absl::Status CheckMaskedInputAllowed(int client) const;
  struct State;
  explicit ServerSession(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_PROTOCOL_H_
