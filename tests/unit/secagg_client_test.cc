// SecAggParticipant (client_sdk/src/secagg_client.h): whole rounds of participants, relayed by
// the test to the library's ServerSession without a network. The tasks are fl.v1 protos read by
// the transport's TaskFromProto (and so the serde); the participants' replies go to the server
// through the serde's proto form, as they travel on the wire. Also: the saved message of an
// answered stage; refusals.
#include "client_sdk/src/secagg_client.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_sdk/internal/transport.h"
#include "client_sdk/src/grpc_wire.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"
#include "fl/wire/secagg_serde.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client::internal {
namespace {

using ::fl::wire::DirectoryToProto;
using ::fl::wire::KeysFromProto;
using ::fl::wire::KeysToProto;
using ::fl::wire::ParamsToProto;
using ::fl::wire::SharesToProto;
using ::fl::wire::SurvivorListToProto;
using ::fl::wire::UnmaskFromProto;
using ::fl::wire::UnmaskRequestToProto;
using ::fl::wire::UnmaskToProto;
using ::testing::HasSubstr;

constexpr size_t kDim = 6;

SecAggParticipant::Randomness Seeded(uint64_t seed) {
  return {.protocol = [seed] { return secagg::MakeDeterministicRandomSource(seed); },
          .noise = [seed] { return aggregation::dp::MakeSeededBitSource(seed); }};
}

// Every field of two replies is the same (a stage answered again gives back its saved message).
void ExpectSameReply(const SecAggReply& a, const SecAggReply& b) {
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.task_id, b.task_id);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.decline_reason, b.decline_reason);
  ASSERT_EQ(a.keys.has_value(), b.keys.has_value());
  if (a.keys.has_value()) {
    EXPECT_EQ(a.keys->client, b.keys->client);
    EXPECT_EQ(a.keys->cipher_public, b.keys->cipher_public);
    EXPECT_EQ(a.keys->mask_public, b.keys->mask_public);
  }
  ASSERT_EQ(a.shares.has_value(), b.shares.has_value());
  if (a.shares.has_value()) {
    EXPECT_EQ(a.shares->client, b.shares->client);
    EXPECT_EQ(a.shares->ciphertexts, b.shares->ciphertexts);
  }
  ASSERT_EQ(a.unmask.has_value(), b.unmask.has_value());
  if (a.unmask.has_value()) {
    EXPECT_EQ(a.unmask->client, b.unmask->client);
    EXPECT_EQ(a.unmask->self_seed_shares, b.unmask->self_seed_shares);
    EXPECT_EQ(a.unmask->mask_key_shares, b.unmask->mask_key_shares);
  }
}

std::vector<uint64_t> WordsOf(const MaskedUpload& upload) {
  std::vector<uint64_t> words(upload.payload.size() / upload.word_bytes);
  for (size_t i = 0; i < words.size(); ++i) {
    uint64_t w = 0;
    for (size_t b = 0; b < upload.word_bytes; ++b) {
      w |= static_cast<uint64_t>(upload.payload[i * upload.word_bytes + b]) << (8 * b);
    }
    words[i] = w;
  }
  return words;
}

// One round of n participants against a ServerSession, the test playing the server's relay.
class Round {
 public:
  // With `identities`, every participant signs with a certificate of one CA and checks its
  // peers', and the server checks them too, as over mutual TLS.
  Round(int n, SecAggRoundParams params, bool identities = false) : params_(params) {
    v1::SecAggParams proto;
    ParamsToProto(params, &proto);
    *base_.mutable_secagg()->mutable_params() = proto;
    base_.set_run_id(1);
    base_.set_round(3);
    for (int i = 0; i < n; ++i) clients_.push_back(std::make_unique<SecAggParticipant>(Seeded(i)));
    secagg::SessionIdentity identity;
    identity.context = secagg::SessionContext(1, 3, "r3.a0.c0");  // what every client derives
    if (identities) {
      absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority("test CA", 1);
      EXPECT_TRUE(ca.ok()) << ca.status();
      std::shared_ptr<const secagg::IdentityVerifier> verifier =
          *secagg::MakeX509Verifier(ca->cert_pem);
      for (int i = 0; i < n; ++i) {
        absl::StatusOr<CertAndKey> site = MakeClientCertificate(*ca, absl::StrCat("site-", i), 1);
        EXPECT_TRUE(site.ok()) << site.status();
        clients_[i]->SetIdentity(*secagg::MakeX509Signer(site->cert_pem, site->key_pem), verifier);
      }
      identity.verifier = verifier;
    }
    server_ = *secagg::ServerSession::Create(params.secagg, kDim, std::move(identity));
  }

  v1::Task TaskFor(int i, v1::Task::Kind kind) const {
    v1::Task t = base_;
    t.set_kind(kind);
    t.set_task_id(absl::StrCat("r3.a0.c", i));
    t.mutable_secagg()->set_secagg_id(i);
    return t;
  }
  SecAggParticipant& client(int i) { return *clients_[i]; }
  const secagg::KeyDirectory& directory() const { return directory_; }
  secagg::ServerSession& server() { return *server_; }

  void Advertise() {
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) {
      v1::Task t = TaskFor(i, v1::Task::SECAGG_ADVERTISE_KEYS);
      absl::StatusOr<SecAggReply> m = clients_[i]->AdvertiseKeys(TaskFromProto(t), kDim);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->run_id, t.run_id());
      EXPECT_EQ(m->round, t.round());
      EXPECT_EQ(m->task_id, t.task_id());
      EXPECT_EQ(m->stage, ClientTask::Kind::kSecAggAdvertise);
      EXPECT_EQ(m->decline_reason, "");
      EXPECT_FALSE(m->shares.has_value());
      EXPECT_FALSE(m->unmask.has_value());
      ASSERT_TRUE(m->keys.has_value());
      EXPECT_EQ(m->keys->client, i);
      // Over the wire: the serde's proto and back.
      v1::SecAggKeys proto;
      KeysToProto(*m->keys, &proto);
      absl::StatusOr<secagg::KeyAdvertisement> keys = KeysFromProto(proto);
      ASSERT_TRUE(keys.ok()) << keys.status();
      EXPECT_EQ(keys->cipher_public, m->keys->cipher_public);
      EXPECT_EQ(keys->mask_public, m->keys->mask_public);
      ASSERT_TRUE(server_->ReceiveKeys(*keys).ok());
    }
    absl::StatusOr<secagg::KeyDirectory> dir = server_->CloseAdvertiseKeys();
    ASSERT_TRUE(dir.ok()) << dir.status();
    directory_ = *dir;
  }

  void Share() {
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) {
      v1::Task t = TaskFor(i, v1::Task::SECAGG_SHARE_KEYS);
      for (const auto& [id, keys] : directory_.keys)
        KeysToProto(keys, t.mutable_secagg()->add_directory());
      absl::StatusOr<SecAggReply> m = clients_[i]->ShareKeys(TaskFromProto(t));
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->task_id, t.task_id());
      EXPECT_EQ(m->stage, ClientTask::Kind::kSecAggShare);
      EXPECT_FALSE(m->keys.has_value());
      EXPECT_FALSE(m->unmask.has_value());
      ASSERT_TRUE(m->shares.has_value());
      EXPECT_EQ(m->shares->client, i);
      EXPECT_FALSE(m->shares->ciphertexts.empty());
      // Over the wire: the serde's proto, read back as the server does (by recipient).
      v1::SecAggShares proto;
      SharesToProto(*m->shares, &proto);
      secagg::EncryptedShares shares{.client = i, .ciphertexts = {}};
      for (const v1::SecAggCiphertext& c : proto.ciphertexts()) {
        shares.ciphertexts[c.peer()] = secagg::Bytes(c.ciphertext().begin(), c.ciphertext().end());
      }
      EXPECT_EQ(shares.ciphertexts, m->shares->ciphertexts);
      ASSERT_TRUE(server_->ReceiveShares(shares).ok());
    }
    absl::StatusOr<std::map<int, secagg::ShareBundle>> bundles = server_->CloseShareKeys();
    ASSERT_TRUE(bundles.ok()) << bundles.status();
    bundles_ = *bundles;
  }

  v1::Task MaskTask(int i) const {
    v1::Task t = TaskFor(i, v1::Task::SECAGG_MASKED_INPUT);
    for (const auto& [from, sealed] : bundles_.at(i).ciphertexts) {
      v1::SecAggCiphertext* c = t.mutable_secagg()->add_bundle();
      c->set_peer(from);
      c->set_ciphertext(std::string(sealed.begin(), sealed.end()));
    }
    return t;
  }

  // Clients not in `dropped` mask `changes[i]` with `examples[i]`.
  void Mask(const std::vector<std::vector<float>>& changes, const std::vector<int64_t>& examples,
            const std::set<int>& dropped) {
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) {
      if (dropped.count(i) != 0) continue;
      std::vector<float> change = changes[i];
      absl::StatusOr<const MaskedUpload*> up =
          clients_[i]->MaskInput(TaskFromProto(MaskTask(i)), change, examples[i]);
      ASSERT_TRUE(up.ok()) << up.status();
      const size_t word = params_.secagg.modulus_bits == 64 ? 8 : 4;
      EXPECT_EQ((*up)->word_bytes, word);
      EXPECT_EQ((*up)->encoding, word == 8 ? UpdateHeader::Encoding::kMaskedUint64
                                           : UpdateHeader::Encoding::kMaskedUint32);
      EXPECT_EQ((*up)->payload.size(), (kDim + 1) * word);
      ASSERT_TRUE(server_->ReceiveMaskedInput({.client = i, .words = WordsOf(**up)}).ok());
    }
  }

  // Client `i` signs `survivors` (stage 4), as the server's consistency task asks.
  absl::StatusOr<SecAggReply> Sign(int i, const std::vector<int>& survivors) {
    v1::Task t = TaskFor(i, v1::Task::SECAGG_CONSISTENCY);
    SurvivorListToProto({.survivors = survivors}, t.mutable_secagg());
    return clients_[i]->SignSurvivors(TaskFromProto(t));
  }

  // Stages 4 and 5.
  absl::StatusOr<secagg::AggregateResult> Unmask() {
    absl::StatusOr<secagg::SurvivorList> list = server_->CloseMaskedInput();
    if (!list.ok()) return list.status();
    for (int i : list->survivors) {
      absl::StatusOr<SecAggReply> m = Sign(i, list->survivors);
      if (!m.ok()) return m.status();
      EXPECT_EQ(m->stage, ClientTask::Kind::kSecAggConsistency);
      if (!m->survivor_signature.has_value()) {
        return absl::InternalError(absl::StrCat("client ", i, "'s reply has no signature"));
      }
      if (absl::Status s = server_->ReceiveSurvivorSignature(*m->survivor_signature); !s.ok()) {
        return s;
      }
    }
    absl::StatusOr<secagg::UnmaskRequest> request = server_->CloseConsistency();
    if (!request.ok()) return request.status();
    for (const auto& [i, endorsement] : request->signatures) {
      v1::Task t = TaskFor(i, v1::Task::SECAGG_UNMASK);
      UnmaskRequestToProto(*request, t.mutable_secagg());
      absl::StatusOr<SecAggReply> m = clients_[i]->Unmask(TaskFromProto(t));
      if (!m.ok()) return m.status();
      EXPECT_EQ(m->task_id, t.task_id());
      EXPECT_EQ(m->stage, ClientTask::Kind::kSecAggUnmask);
      EXPECT_FALSE(m->keys.has_value());
      EXPECT_FALSE(m->shares.has_value());
      if (!m->unmask.has_value()) {
        return absl::InternalError(absl::StrCat("client ", i, "'s unmask reply has no shares"));
      }
      EXPECT_EQ(m->unmask->client, i);
      // Over the wire: the serde's proto and back.
      v1::SecAggUnmask proto;
      UnmaskToProto(*m->unmask, &proto);
      absl::StatusOr<secagg::UnmaskResponse> response = UnmaskFromProto(proto, i);
      if (!response.ok()) return response.status();
      EXPECT_EQ(response->self_seed_shares, m->unmask->self_seed_shares);
      EXPECT_EQ(response->mask_key_shares, m->unmask->mask_key_shares);
      if (absl::Status s = server_->ReceiveUnmask(*response); !s.ok()) return s;
    }
    return server_->Finish();
  }

 private:
  SecAggRoundParams params_;
  v1::Task base_;
  std::vector<std::unique_ptr<SecAggParticipant>> clients_;
  std::unique_ptr<secagg::ServerSession> server_;
  secagg::KeyDirectory directory_;
  std::map<int, secagg::ShareBundle> bundles_;
};

SecAggRoundParams Params(int n, int modulus_bits = 32) {
  SecAggRoundParams p;
  p.secagg = *secagg::DefaultSecAggParams(n, modulus_bits, 100);
  p.secagg.graph_seed = 7;
  p.secagg.clip_range = 2.0;
  p.example_unit = 10;
  return p;
}

std::vector<std::vector<float>> Changes(int n) {
  std::vector<std::vector<float>> out(n, std::vector<float>(kDim));
  for (int i = 0; i < n; ++i) {
    for (size_t j = 0; j < kDim; ++j) out[i][j] = 0.1f * static_cast<float>(i) - 0.05f * j;
  }
  return out;
}

TEST(SecAggWeightTest, CeilOfExamplesPerUnitClampedToOneAndMaxWeight) {
  EXPECT_EQ(SecAggWeight(25, 10, 100), 3u);
  EXPECT_EQ(SecAggWeight(30, 10, 100), 3u);
  EXPECT_EQ(SecAggWeight(1, 10, 100), 1u);
  EXPECT_EQ(SecAggWeight(0, 10, 100), 1u);
  EXPECT_EQ(SecAggWeight(5000, 1, 1000), 1000u);
  EXPECT_EQ(SecAggWeight(999, 1, 1000), 999u);
}

class SecAggParticipantRoundTest : public ::testing::TestWithParam<int> {};

TEST_P(SecAggParticipantRoundTest, SumIsTheWeightedMeanOfTheSurvivorsChanges) {
  const int n = 6;
  const SecAggRoundParams params = Params(n, GetParam());
  Round round(n, params);
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  const std::vector<std::vector<float>> changes = Changes(n);
  const std::vector<int64_t> examples = {10, 25, 7, 40, 100, 13};  // weights 1 3 1 4 10 2
  const std::set<int> dropped = {2};                               // after sharing its keys
  ASSERT_NO_FATAL_FAILURE(round.Mask(changes, examples, dropped));
  absl::StatusOr<secagg::AggregateResult> result = round.Unmask();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, (std::vector<int>{0, 1, 3, 4, 5}));
  EXPECT_EQ(result->sum.back(), 1u + 3 + 4 + 10 + 2);  // the summed weights
  const double bound =
      secagg::QuantizationErrorBound(params.secagg.clip_range, params.secagg.quantization_bits);
  for (size_t j = 0; j < kDim; ++j) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) {
      if (dropped.count(i) != 0) continue;
      const double w = SecAggWeight(examples[i], params.example_unit, params.secagg.max_weight);
      num += w * changes[i][j];
      den += w;
    }
    EXPECT_NEAR(result->mean[j], num / den, bound) << "coordinate " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Moduli, SecAggParticipantRoundTest, ::testing::Values(32, 64));

// Sites with certificates: the round sums as without, and a site refuses a directory whose
// neighbour entry lost its signature (a server that swaps in its own keys cannot sign them).
TEST(SecAggParticipantTest, SitesWithCertificatesSignAndCheckEachOther) {
  const int n = 5;
  Round round(n, Params(n), /*identities=*/true);
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  ASSERT_NO_FATAL_FAILURE(round.Mask(Changes(n), {10, 10, 10, 10, 10}, {}));
  absl::StatusOr<secagg::AggregateResult> result = round.Unmask();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, (std::vector<int>{0, 1, 2, 3, 4}));

  Round evil(n, Params(n), /*identities=*/true);
  ASSERT_NO_FATAL_FAILURE(evil.Advertise());
  v1::Task t = evil.TaskFor(0, v1::Task::SECAGG_SHARE_KEYS);
  secagg::KeyDirectory directory = evil.directory();
  directory.keys.at(1).signature.clear();
  DirectoryToProto(directory, t.mutable_secagg());
  absl::Status s = evil.client(0).ShareKeys(TaskFromProto(t)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("neighbour 1's keys are not signed"));
}

TEST(SecAggParticipantTest, DistributedDpClipsEachChangeAndWeighsEveryClientOne) {
  const int n = 4;
  SecAggRoundParams params = Params(n);
  params.dp_clip_norm = 0.1;  // below every change's norm: all are scaled down
  params.dp_noise_stddev = 0;
  Round round(n, params);
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  const std::vector<std::vector<float>> changes = Changes(n);
  ASSERT_NO_FATAL_FAILURE(round.Mask(changes, {10, 500, 1000, 20}, {}));
  absl::StatusOr<secagg::AggregateResult> result = round.Unmask();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->sum.back(), static_cast<uint64_t>(n));
  std::vector<std::vector<float>> clipped = changes;
  for (auto& c : clipped) ASSERT_TRUE(aggregation::dp::ClipL2(c, params.dp_clip_norm).ok());
  const double bound =
      secagg::QuantizationErrorBound(params.secagg.clip_range, params.secagg.quantization_bits);
  for (size_t j = 0; j < kDim; ++j) {
    double mean = 0;
    for (const auto& c : clipped) mean += c[j] / n;
    EXPECT_NEAR(result->mean[j], mean, bound) << "coordinate " << j;
  }
}

TEST(SecAggParticipantTest, DistributedDpNoiseChangesTheUpload) {
  SecAggRoundParams quiet = Params(3);
  quiet.dp_clip_norm = 1.0;
  SecAggRoundParams noisy = quiet;
  noisy.dp_noise_stddev = 0.5;
  std::vector<std::vector<uint64_t>> sums;
  for (const SecAggRoundParams& p : {quiet, noisy}) {
    Round round(3, p);
    ASSERT_NO_FATAL_FAILURE(round.Advertise());
    ASSERT_NO_FATAL_FAILURE(round.Share());
    ASSERT_NO_FATAL_FAILURE(round.Mask(Changes(3), {1, 1, 1}, {}));
    absl::StatusOr<secagg::AggregateResult> result = round.Unmask();
    ASSERT_TRUE(result.ok()) << result.status();
    sums.push_back(result->sum);
  }
  EXPECT_NE(sums[0], sums[1]);  // same seeds: only the noise differs
}

TEST(SecAggParticipantTest, AnAnsweredStageGivesBackItsSavedMessage) {
  Round round(3, Params(3));
  const ClientTask t = TaskFromProto(round.TaskFor(0, v1::Task::SECAGG_ADVERTISE_KEYS));
  absl::StatusOr<SecAggReply> first = round.client(0).AdvertiseKeys(t, kDim);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->keys.has_value());
  EXPECT_TRUE(round.client(0).Answered(t));
  absl::StatusOr<SecAggReply> again = round.client(0).AdvertiseKeys(t, kDim);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameReply(*again, *first);
  // A poll with the same task id keeps the session; another id drops it.
  round.client(0).KeepOnly(t.run_id, t.task_id);
  round.client(0).KeepOnly(t.run_id, "");
  EXPECT_TRUE(round.client(0).Answered(t));
  round.client(0).KeepOnly(t.run_id, "r4.a0.c0");
  EXPECT_FALSE(round.client(0).Answered(t));
}

// Task ids repeat across runs ("r3.a0.c0" in run 1 and in run 2): a task of another run with the
// same id, at any stage, finds neither the old run's session nor its saved messages, and a poll
// bringing it drops the session.
TEST(SecAggParticipantTest, TheSessionIsKeyedByRunAndTaskId) {
  const int n = 3;
  Round round(n, Params(n));
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  auto in_run_2 = [](v1::Task t) {
    t.set_run_id(2);
    return TaskFromProto(t);
  };
  // Client 0 answered share keys in run 1; run 2 (it missed that run's advertise) offers the same
  // task id at share keys: no session, not run 1's saved shares.
  const v1::Task share1 = round.TaskFor(0, v1::Task::SECAGG_SHARE_KEYS);
  ASSERT_TRUE(round.client(0).Answered(TaskFromProto(share1)));
  const ClientTask share2 = in_run_2(share1);
  EXPECT_FALSE(round.client(0).Answered(share2));
  absl::StatusOr<SecAggReply> shares = round.client(0).ShareKeys(share2);
  EXPECT_EQ(shares.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(shares.status().message(), HasSubstr("no secure-aggregation session for task "
                                                   "r3.a0.c0 of run 2"));
  EXPECT_EQ(round.client(0).CheckSession(share2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(round.client(0).params(share2), nullptr);

  // Client 1 masked its input in run 1: run 2's masked-input task with that id gets no saved
  // upload and cannot mask; its unmask task finds no session.
  ASSERT_NO_FATAL_FAILURE(round.Mask(Changes(n), {1, 1, 1}, {}));
  const v1::Task mask1_proto = round.MaskTask(1);
  const ClientTask mask1 = TaskFromProto(mask1_proto);
  ASSERT_NE(round.client(1).SavedUpload(mask1), nullptr);
  EXPECT_EQ(round.client(1).SavedUpload(in_run_2(mask1_proto)), nullptr);
  std::vector<float> change(kDim, 0.f);
  EXPECT_EQ(round.client(1).MaskInput(in_run_2(mask1_proto), change, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::Task unmask2 = round.TaskFor(1, v1::Task::SECAGG_UNMASK);
  for (int s : {0, 1, 2}) unmask2.mutable_secagg()->add_survivors(s);
  EXPECT_EQ(round.client(1).Unmask(in_run_2(unmask2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Run 1's session is still there for run 1's tasks ...
  EXPECT_NE(round.client(1).SavedUpload(mask1), nullptr);
  // ... until a poll brings a task of run 2 with the same id; its advertise then answers with a
  // new session, in run 2's name.
  round.client(1).KeepOnly(2, mask1.task_id);
  EXPECT_EQ(round.client(1).SavedUpload(mask1), nullptr);
  const ClientTask advertise2 = in_run_2(round.TaskFor(1, v1::Task::SECAGG_ADVERTISE_KEYS));
  absl::StatusOr<SecAggReply> keys = round.client(1).AdvertiseKeys(advertise2, kDim);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->run_id, 2);
  ASSERT_TRUE(keys->keys.has_value());
  EXPECT_TRUE(round.client(1).Answered(advertise2));
  EXPECT_FALSE(
      round.client(1).Answered(TaskFromProto(round.TaskFor(1, v1::Task::SECAGG_ADVERTISE_KEYS))));
}

// The unmask task offered again with the same id (the answer was lost in transit) but other lists:
// the participant hands back its first answer, so that across both answers it never reveals the
// self-mask-seed share and the mask-key share of one peer.
TEST(SecAggParticipantTest, AnUnmaskOfferedAgainWithOtherListsGetsTheFirstAnswer) {
  const int n = 5;
  Round round(n, Params(n));
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  ASSERT_NO_FATAL_FAILURE(round.Mask(Changes(n), {1, 1, 1, 1, 1}, {2}));
  auto unmask_task = [&](const std::vector<int>& survivors, const std::vector<int>& dropped) {
    v1::Task t = round.TaskFor(0, v1::Task::SECAGG_UNMASK);
    for (int s : survivors) t.mutable_secagg()->add_survivors(s);
    for (int d : dropped) t.mutable_secagg()->add_dropped(d);
    return TaskFromProto(t);
  };
  ASSERT_TRUE(round.Sign(0, {0, 1, 3, 4}).ok());
  absl::StatusOr<SecAggReply> first = round.client(0).Unmask(unmask_task({0, 1, 3, 4}, {2}));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->unmask.has_value());
  ASSERT_EQ(first->unmask->mask_key_shares.size(), 1u);  // of 2
  EXPECT_EQ(first->unmask->mask_key_shares.count(2), 1u);
  ASSERT_GT(first->unmask->self_seed_shares.size(), 0u);
  // Now 2 listed as a survivor (its self-seed share), or 1 and 3 as dropped (their mask keys).
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> others = {
      {{0, 1, 2, 3, 4}, {}}, {{0, 4}, {1, 2, 3}}, {{0, 2, 4}, {1, 3}}};
  for (const auto& [survivors, dropped] : others) {
    absl::StatusOr<SecAggReply> again = round.client(0).Unmask(unmask_task(survivors, dropped));
    // The documented contract (secagg_client.h): an answered stage gives back its saved message,
    // so that a resend after transport trouble carries the same shares.
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameReply(*again, *first);
    ASSERT_TRUE(again->unmask.has_value());
    std::map<int, std::set<std::string>> revealed;  // peer -> kinds of its shares revealed
    for (const SecAggReply* m : {&*first, &*again}) {
      for (const auto& [owner, share] : m->unmask->self_seed_shares) {
        revealed[owner].insert("self seed");
      }
      for (const auto& [owner, share] : m->unmask->mask_key_shares) {
        revealed[owner].insert("mask key");
      }
    }
    for (const auto& [peer, kinds] : revealed) {
      EXPECT_EQ(kinds.size(), 1u) << "both shares of client " << peer << " revealed";
    }
  }
}

TEST(SecAggParticipantTest, AMaskedInputIsKeptForAnUploadSentAgain) {
  Round round(3, Params(3));
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  const ClientTask t = TaskFromProto(round.MaskTask(1));
  EXPECT_EQ(round.client(1).SavedUpload(t), nullptr);
  std::vector<float> change(kDim, 0.25f);
  absl::StatusOr<const MaskedUpload*> up = round.client(1).MaskInput(t, change, 10);
  ASSERT_TRUE(up.ok()) << up.status();
  const std::vector<std::byte> payload = (*up)->payload;
  ASSERT_NE(round.client(1).SavedUpload(t), nullptr);
  EXPECT_EQ(round.client(1).SavedUpload(t)->payload, payload);
}

TEST(SecAggParticipantTest, StagesWithoutASessionAreRefused) {
  Round round(3, Params(3));
  SecAggParticipant fresh(Seeded(9));  // e.g. a client that restarted after advertising
  absl::Status s =
      fresh.ShareKeys(TaskFromProto(round.TaskFor(0, v1::Task::SECAGG_SHARE_KEYS))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no secure-aggregation session for task r3.a0.c0"));
  std::vector<float> change(kDim, 0.f);
  EXPECT_EQ(
      fresh.MaskInput(TaskFromProto(round.TaskFor(0, v1::Task::SECAGG_MASKED_INPUT)), change, 1)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fresh.Unmask(TaskFromProto(round.TaskFor(0, v1::Task::SECAGG_UNMASK))).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A session for client 0 does not answer a task that names another secagg id.
  ASSERT_TRUE(
      fresh.AdvertiseKeys(TaskFromProto(round.TaskFor(0, v1::Task::SECAGG_ADVERTISE_KEYS)), kDim)
          .ok());
  v1::Task other = round.TaskFor(0, v1::Task::SECAGG_SHARE_KEYS);
  other.mutable_secagg()->set_secagg_id(2);
  EXPECT_THAT(fresh.ShareKeys(TaskFromProto(other)).status().message(),
              HasSubstr("names secagg id 2, this client is 0"));
}

TEST(SecAggParticipantTest, BadParametersAreRefusedAtAdvertise) {
  Round round(3, Params(3));
  v1::Task t = round.TaskFor(0, v1::Task::SECAGG_ADVERTISE_KEYS);
  t.mutable_secagg()->mutable_params()->set_modulus_bits(48);
  absl::Status s = SecAggParticipant(Seeded(1)).AdvertiseKeys(TaskFromProto(t), kDim).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secagg.params: "));
  t = round.TaskFor(5, v1::Task::SECAGG_ADVERTISE_KEYS);  // id outside [0, n)
  EXPECT_EQ(SecAggParticipant(Seeded(1)).AdvertiseKeys(TaskFromProto(t), kDim).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SecAggParticipantTest, RefusesToRevealBothSharesOfOnePeer) {
  const int n = 4;
  Round round(n, Params(n));
  ASSERT_NO_FATAL_FAILURE(round.Advertise());
  ASSERT_NO_FATAL_FAILURE(round.Share());
  ASSERT_NO_FATAL_FAILURE(round.Mask(Changes(n), {1, 1, 1, 1}, {}));
  ASSERT_TRUE(round.Sign(0, {0, 1, 2, 3}).ok());
  v1::Task t = round.TaskFor(0, v1::Task::SECAGG_UNMASK);
  for (int s : {0, 1, 2, 3}) t.mutable_secagg()->add_survivors(s);
  t.mutable_secagg()->add_dropped(2);  // a lying server: 2 both survived and dropped
  absl::Status s = round.client(0).Unmask(TaskFromProto(t)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("refuses to unmask"));
}

}  // namespace
}  // namespace fl::client::internal
