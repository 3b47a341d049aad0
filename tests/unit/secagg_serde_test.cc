// fl::wire's serde between fl.v1's secure-aggregation messages and fl::secagg's structs (both the
// server's and the SDK's): round trips, and refusals that name the field (key sizes, share
// lengths, repeated ids).
#include "fl/wire/secagg_serde.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::wire {
namespace {

using ::testing::HasSubstr;

secagg::Key32 Filled(uint8_t first) {
  secagg::Key32 k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(first + i);
  return k;
}

v1::SecAggParams ValidParams() {
  secagg::RoundParams p;
  p.secagg = *secagg::DefaultSecAggParams(5);
  p.secagg.graph_seed = 42;
  p.example_unit = 10;
  v1::SecAggParams out;
  ParamsToProto(p, &out);
  return out;
}

TEST(SecAggSerdeTest, ParamsRoundTrip) {
  secagg::RoundParams p;
  p.secagg = *secagg::DefaultSecAggParams(7, 64, 50);
  p.secagg.graph_seed = 99;
  p.example_unit = 3;
  p.dp_clip_norm = 1.5;
  p.dp_noise_stddev = 0.25;
  v1::SecAggParams proto;
  ParamsToProto(p, &proto);
  absl::StatusOr<secagg::RoundParams> back = ParamsFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->secagg.num_clients, 7);
  EXPECT_EQ(back->secagg.num_neighbors, p.secagg.num_neighbors);
  EXPECT_EQ(back->secagg.threshold, p.secagg.threshold);
  EXPECT_EQ(back->secagg.clip_range, p.secagg.clip_range);
  EXPECT_EQ(back->secagg.quantization_bits, p.secagg.quantization_bits);
  EXPECT_EQ(back->secagg.modulus_bits, 64);
  EXPECT_EQ(back->secagg.max_weight, 50u);
  EXPECT_EQ(back->secagg.graph_seed, 99u);
  EXPECT_EQ(back->example_unit, 3);
  EXPECT_EQ(back->dp_clip_norm, 1.5);
  EXPECT_EQ(back->dp_noise_stddev, 0.25);
}

TEST(SecAggSerdeTest, DiscreteGaussianParamsRoundTripAndBadOnesAreRefused) {
  secagg::RoundParams p;
  p.secagg = *secagg::DefaultSecAggParams(7, 64);
  p.secagg.ddg = {.clip_norm = 2.0,
                  .granularity = 1e-9,
                  .site_stddev = 0.3,
                  .beta = 0.5,
                  .rotation_seed = 0xfeedfacecafebeefULL,
                  .modulus_bits = 64};
  v1::SecAggParams proto;
  ParamsToProto(p, &proto);
  absl::StatusOr<secagg::RoundParams> back = ParamsFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(secagg::UsesDdg(back->secagg));
  EXPECT_EQ(back->secagg.ddg.clip_norm, 2.0);
  EXPECT_EQ(back->secagg.ddg.granularity, 1e-9);
  EXPECT_EQ(back->secagg.ddg.site_stddev, 0.3);
  EXPECT_EQ(back->secagg.ddg.beta, 0.5);
  EXPECT_EQ(back->secagg.ddg.rotation_seed, 0xfeedfacecafebeefULL);
  EXPECT_EQ(back->secagg.ddg.modulus_bits, 64);
  // Without the encoding, none comes back.
  EXPECT_FALSE(secagg::UsesDdg(ParamsFromProto(ValidParams())->secagg));
  v1::SecAggParams bad = proto;
  bad.set_ddg_granularity(-1);
  EXPECT_THAT(ParamsFromProto(bad).status().message(), HasSubstr("granularity"));
  bad = proto;
  bad.set_ddg_stddev(0);
  EXPECT_THAT(ParamsFromProto(bad).status().message(), HasSubstr("stddev"));
  bad = proto;
  bad.set_ddg_beta(1);
  EXPECT_THAT(ParamsFromProto(bad).status().message(), HasSubstr("beta"));
}

TEST(SecAggSerdeTest, ParamsRefusalsNameTheField) {
  v1::SecAggParams p = ValidParams();
  ASSERT_TRUE(ParamsFromProto(p).ok());

  v1::SecAggParams no_privacy = p;
  no_privacy.set_threshold(1);
  absl::Status s = ParamsFromProto(no_privacy).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secagg.params: "));

  v1::SecAggParams unit = p;
  unit.set_example_unit(0);
  EXPECT_EQ(ParamsFromProto(unit).status().message(),
            "secagg.params.example_unit must be >= 1, got 0");

  v1::SecAggParams noise = p;
  noise.set_dp_noise_stddev(0.5);
  EXPECT_EQ(ParamsFromProto(noise).status().message(),
            "secagg.params.dp_noise_stddev is set without dp_clip_norm: noise needs clipping");

  v1::SecAggParams negative = p;
  negative.set_dp_clip_norm(-1);
  EXPECT_THAT(ParamsFromProto(negative).status().message(),
              HasSubstr("secagg.params.dp_clip_norm must be a finite number >= 0, got -1"));
}

TEST(SecAggSerdeTest, KeysRoundTripAndWrongSizesAreRefused) {
  const secagg::KeyAdvertisement keys{
      .client = 3, .cipher_public = Filled(1), .mask_public = Filled(100)};
  v1::SecAggKeys proto;
  KeysToProto(keys, &proto);
  EXPECT_EQ(proto.secagg_id(), 3);
  EXPECT_EQ(proto.cipher_public().size(), 32u);
  absl::StatusOr<secagg::KeyAdvertisement> back = KeysFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->client, 3);
  EXPECT_EQ(back->cipher_public, keys.cipher_public);
  EXPECT_EQ(back->mask_public, keys.mask_public);

  v1::SecAggKeys short_key = proto;
  short_key.mutable_mask_public()->pop_back();
  absl::Status s = KeysFromProto(short_key).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "keys.mask_public has 31 bytes, expected 32");

  v1::SecAggTask task;
  *task.add_directory() = proto;
  v1::SecAggKeys* other = task.add_directory();
  KeysToProto({.client = 4, .cipher_public = Filled(7), .mask_public = Filled(9)}, other);
  other->set_cipher_public(other->cipher_public() + "x");
  s = DirectoryFromProto(task).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "secagg.directory[1].cipher_public has 33 bytes, expected 32");
}

TEST(SecAggSerdeTest, DirectoryByClientAndRepeatedIdsAreRefused) {
  v1::SecAggTask task;
  for (int id : {4, 0, 2}) {
    KeysToProto({.client = id, .cipher_public = Filled(id), .mask_public = Filled(50 + id)},
                task.add_directory());
  }
  absl::StatusOr<secagg::KeyDirectory> dir = DirectoryFromProto(task);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->keys.size(), 3u);
  EXPECT_EQ(dir->keys.at(2).mask_public, Filled(52));

  KeysToProto({.client = 0, .cipher_public = Filled(8), .mask_public = Filled(9)},
              task.add_directory());
  EXPECT_EQ(DirectoryFromProto(task).status().message(),
            "secagg.directory[3].secagg_id 0 is listed twice");
}

TEST(SecAggSerdeTest, SharesGoOutByRecipientAndComeBackByPeer) {
  secagg::EncryptedShares shares{.client = 1, .ciphertexts = {}};
  shares.ciphertexts[0] = secagg::Bytes{1, 2, 3};
  shares.ciphertexts[4] = secagg::Bytes(140, 0xab);
  v1::SecAggShares proto;
  SharesToProto(shares, &proto);
  ASSERT_EQ(proto.ciphertexts_size(), 2);
  EXPECT_EQ(proto.ciphertexts(0).peer(), 0);
  EXPECT_EQ(proto.ciphertexts(1).ciphertext().size(), 140u);

  // The same messages, relayed to a recipient as its bundle (peer = the sender there).
  v1::SecAggTask task;
  *task.mutable_bundle() = proto.ciphertexts();
  absl::StatusOr<secagg::ShareBundle> bundle = BundleFromProto(task);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_EQ(bundle->ciphertexts, shares.ciphertexts);

  task.add_bundle()->set_peer(7);
  EXPECT_EQ(BundleFromProto(task).status().message(), "secagg.bundle[2].ciphertext is empty");
  task.mutable_bundle(2)->set_ciphertext("abc");
  task.mutable_bundle(2)->set_peer(4);
  EXPECT_EQ(BundleFromProto(task).status().message(), "secagg.bundle[2].peer 4 is listed twice");
}

TEST(SecAggSerdeTest, UnmaskRoundTripAndShareLengthsAreChecked) {
  secagg::UnmaskResponse response{.client = 2, .self_seed_shares = {}, .mask_key_shares = {}};
  response.self_seed_shares[0] = {.x = 3, .y = {1, 2, 3, 4, 5}};
  response.self_seed_shares[1] = {.x = 3, .y = {6, 7, 8, 9, 10}};
  response.mask_key_shares[4] = {.x = 3, .y = {11, 12, 13, 14, secagg::kShamirPrime - 1}};
  v1::SecAggUnmask proto;
  UnmaskToProto(response, &proto);
  ASSERT_EQ(proto.self_seed_shares_size(), 2);
  ASSERT_EQ(proto.mask_key_shares_size(), 1);
  EXPECT_EQ(proto.mask_key_shares(0).owner(), 4);
  EXPECT_EQ(proto.mask_key_shares(0).y_size(), secagg::kShamirPieces);
  absl::StatusOr<secagg::UnmaskResponse> back = UnmaskFromProto(proto, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->self_seed_shares, response.self_seed_shares);
  EXPECT_EQ(back->mask_key_shares, response.mask_key_shares);

  v1::SecAggUnmask short_share = proto;
  short_share.mutable_self_seed_shares(1)->mutable_y()->RemoveLast();
  absl::Status s = UnmaskFromProto(short_share, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unmask.self_seed_shares[1].y holds 4 values, expected 5");

  v1::SecAggUnmask zero_point = proto;
  zero_point.mutable_mask_key_shares(0)->set_x(0);
  EXPECT_EQ(UnmaskFromProto(zero_point, 2).status().message(),
            "unmask.mask_key_shares[0].x is 0, outside [1, 2^61 - 1)");

  v1::SecAggUnmask out_of_field = proto;
  out_of_field.mutable_mask_key_shares(0)->set_y(4, secagg::kShamirPrime);
  EXPECT_EQ(UnmaskFromProto(out_of_field, 2).status().message(),
            "unmask.mask_key_shares[0].y[4] = 2305843009213693951 is outside the field (must be "
            "< 2^61 - 1)");

  v1::SecAggUnmask twice = proto;
  twice.mutable_self_seed_shares(1)->set_owner(0);
  EXPECT_EQ(UnmaskFromProto(twice, 2).status().message(),
            "unmask.self_seed_shares[1].owner 0 is listed twice");
}

TEST(SecAggSerdeTest, UnmaskRequestRefusesRepeatedIds) {
  v1::SecAggTask task;
  for (int id : {0, 1, 3}) task.add_survivors(id);
  task.add_dropped(2);
  absl::StatusOr<secagg::UnmaskRequest> request = UnmaskRequestFromProto(task);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->survivors, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(request->dropped, (std::vector<int>{2}));
  task.add_dropped(2);
  EXPECT_EQ(UnmaskRequestFromProto(task).status().message(), "secagg.dropped lists client 2 twice");
}

// The identity and signature of a key advertisement, the directory's digests, the survivor set
// and the unmask request's endorsements travel whole; what a client could make too large is
// refused naming the field and the limit.
TEST(SecAggSerdeTest, SignedKeysDigestsAndEndorsementsRoundTripWithinTheirLimits) {
  secagg::KeyAdvertisement keys{.client = 3,
                                .cipher_public = Filled(1),
                                .mask_public = Filled(100),
                                .identity = "-----BEGIN CERTIFICATE-----\nabc\n",
                                .signature = {9, 8, 7}};
  v1::SecAggKeys proto;
  KeysToProto(keys, &proto);
  absl::StatusOr<secagg::KeyAdvertisement> back = KeysFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->identity, keys.identity);
  EXPECT_EQ(back->signature, keys.signature);

  proto.set_identity(std::string(kMaxIdentityBytes + 1, 'x'));
  EXPECT_THAT(std::string(KeysFromProto(proto, "SecAggSubmission.keys").status().message()),
              HasSubstr("SecAggSubmission.keys.identity has 16385 bytes, at most 16384"));
  proto.set_identity("");
  proto.set_signature(std::string(kMaxSignatureBytes + 1, 's'));
  EXPECT_THAT(std::string(KeysFromProto(proto).status().message()),
              HasSubstr("keys.signature has 1025 bytes, at most 1024"));

  secagg::KeyDirectory directory;
  directory.keys[3] = keys;
  directory.digests[0] = Filled(50);
  directory.digests[4] = Filled(60);
  v1::SecAggTask task;
  DirectoryToProto(directory, &task);
  absl::StatusOr<secagg::KeyDirectory> dir = DirectoryFromProto(task);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->digests, directory.digests);
  EXPECT_EQ(dir->keys.at(3).signature, keys.signature);
  task.add_directory_digests()->set_secagg_id(3);  // also in full
  task.mutable_directory_digests(2)->set_digest(std::string(32, 'd'));
  EXPECT_THAT(std::string(DirectoryFromProto(task).status().message()),
              HasSubstr("secagg.directory_digests[2].secagg_id 3 is listed twice"));
  task.mutable_directory_digests(2)->set_secagg_id(7);
  task.mutable_directory_digests(2)->set_digest("short");
  EXPECT_THAT(std::string(DirectoryFromProto(task).status().message()),
              HasSubstr("secagg.directory_digests[2].digest has 5 bytes, expected 32"));

  secagg::UnmaskRequest request{.survivors = {0, 3, 4}, .dropped = {1}, .signatures = {}};
  request.signatures[3] = {.keys = keys, .signature = {1, 2}};
  v1::SecAggTask unmask;
  UnmaskRequestToProto(request, &unmask);
  absl::StatusOr<secagg::UnmaskRequest> got = UnmaskRequestFromProto(unmask);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->signatures.count(3), 1u);
  EXPECT_EQ(got->signatures.at(3).signature, (secagg::Bytes{1, 2}));
  EXPECT_EQ(got->signatures.at(3).keys.identity, keys.identity);
  *unmask.add_signatures() = unmask.signatures(0);
  EXPECT_THAT(std::string(UnmaskRequestFromProto(unmask).status().message()),
              HasSubstr("secagg.signatures[1].keys.secagg_id 3 is listed twice"));

  v1::SecAggTask consistency;
  SurvivorListToProto({.survivors = {0, 2}}, &consistency);
  absl::StatusOr<secagg::SurvivorList> list = SurvivorListFromProto(consistency);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->survivors, (std::vector<int>{0, 2}));
  EXPECT_EQ(SurvivorSignatureFromBytes(std::string(2000, 's'), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<secagg::SurvivorSignature> signature = SurvivorSignatureFromBytes("ab", 1);
  ASSERT_TRUE(signature.ok());
  EXPECT_EQ(signature->client, 1);
  EXPECT_EQ(signature->signature, (secagg::Bytes{'a', 'b'}));
}

}  // namespace
}  // namespace fl::wire
