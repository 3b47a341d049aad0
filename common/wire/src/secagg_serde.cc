#include "fl/wire/secagg_serde.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fl::wire {
namespace {

absl::StatusOr<secagg::Key32> KeyFromBytes(const std::string& bytes, absl::string_view field) {
  secagg::Key32 key{};
  if (bytes.size() != key.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", bytes.size(), " bytes, expected ", key.size()));
  }
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}

std::string ToBytes(std::span<const uint8_t> in) {
  return std::string(reinterpret_cast<const char*>(in.data()), in.size());
}

void ShareToProto(int owner, const secagg::ShamirShare& share, v1::SecAggShare* out) {
  out->set_owner(owner);
  out->set_x(share.x);
  for (uint64_t y : share.y) out->add_y(y);
}

absl::StatusOr<secagg::ShamirShare> ShareFromProto(const v1::SecAggShare& in,
                                                   absl::string_view field) {
  if (in.x() == 0 || in.x() >= secagg::kShamirPrime) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".x is ", in.x(), ", outside [1, 2^61 - 1)"));
  }
  if (in.y_size() != secagg::kShamirPieces) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".y holds ", in.y_size(), " values, expected ", secagg::kShamirPieces));
  }
  secagg::ShamirShare share;
  share.x = in.x();
  for (int i = 0; i < secagg::kShamirPieces; ++i) {
    if (in.y(i) >= secagg::kShamirPrime) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".y[", i, "] = ", in.y(i),
                                                     " is outside the field (must be < 2^61 - 1)"));
    }
    share.y[i] = in.y(i);
  }
  return share;
}

absl::Status ShamirSharesFromProto(const google::protobuf::RepeatedPtrField<v1::SecAggShare>& in,
                                   absl::string_view field,
                                   std::map<int, secagg::ShamirShare>& out) {
  for (int i = 0; i < in.size(); ++i) {
    const std::string name = absl::StrCat(field, "[", i, "]");
    absl::StatusOr<secagg::ShamirShare> share = ShareFromProto(in[i], name);
    if (!share.ok()) return share.status();
    if (!out.emplace(in[i].owner(), *share).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".owner ", in[i].owner(), " is listed twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> IdsFromProto(const google::protobuf::RepeatedField<int32_t>& in,
                                              absl::string_view field) {
  std::set<int> seen;
  for (int id : in) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, " lists client ", id, " twice"));
    }
  }
  return std::vector<int>(in.begin(), in.end());
}

}  // namespace

absl::StatusOr<secagg::RoundParams> ParamsFromProto(const v1::SecAggParams& in) {
  secagg::RoundParams out;
  out.secagg.num_clients = in.num_clients();
  out.secagg.num_neighbors = in.num_neighbors();
  out.secagg.threshold = in.threshold();
  out.secagg.clip_range = in.clip_range();
  out.secagg.quantization_bits = in.quantization_bits();
  out.secagg.modulus_bits = in.modulus_bits();
  out.secagg.max_weight = in.max_weight();
  out.secagg.graph_seed = in.graph_seed();
  out.secagg.corrupt_fraction = in.corrupt_fraction();
  if (in.ddg_granularity() != 0) {
    out.secagg.ddg = {.clip_norm = in.ddg_clip_norm(),
                      .granularity = in.ddg_granularity(),
                      .site_stddev = in.ddg_stddev(),
                      .beta = in.ddg_beta(),
                      .rotation_seed = in.ddg_rotation_seed(),
                      .modulus_bits = in.modulus_bits()};
  }
  if (absl::Status s = secagg::ValidateSecAggParams(out.secagg); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("secagg.params: ", s.message()));
  }
  out.example_unit = in.example_unit();
  if (out.example_unit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("secagg.params.example_unit must be >= 1, got ", out.example_unit));
  }
  out.dp_clip_norm = in.dp_clip_norm();
  out.dp_noise_stddev = in.dp_noise_stddev();
  if (!std::isfinite(out.dp_clip_norm) || out.dp_clip_norm < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "secagg.params.dp_clip_norm must be a finite number >= 0, got ", out.dp_clip_norm));
  }
  if (!std::isfinite(out.dp_noise_stddev) || out.dp_noise_stddev < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "secagg.params.dp_noise_stddev must be a finite number >= 0, got ", out.dp_noise_stddev));
  }
  if (out.dp_noise_stddev > 0 && out.dp_clip_norm == 0) {
    return absl::InvalidArgumentError(
        "secagg.params.dp_noise_stddev is set without dp_clip_norm: noise needs clipping");
  }
  return out;
}

void ParamsToProto(const secagg::RoundParams& in, v1::SecAggParams* out) {
  out->set_num_clients(in.secagg.num_clients);
  out->set_num_neighbors(in.secagg.num_neighbors);
  out->set_threshold(in.secagg.threshold);
  out->set_clip_range(in.secagg.clip_range);
  out->set_quantization_bits(in.secagg.quantization_bits);
  out->set_modulus_bits(in.secagg.modulus_bits);
  out->set_max_weight(in.secagg.max_weight);
  out->set_graph_seed(in.secagg.graph_seed);
  out->set_corrupt_fraction(in.secagg.corrupt_fraction);
  if (secagg::UsesDdg(in.secagg)) {
    out->set_ddg_clip_norm(in.secagg.ddg.clip_norm);
    out->set_ddg_granularity(in.secagg.ddg.granularity);
    out->set_ddg_stddev(in.secagg.ddg.site_stddev);
    out->set_ddg_beta(in.secagg.ddg.beta);
    out->set_ddg_rotation_seed(in.secagg.ddg.rotation_seed);
  }
  out->set_example_unit(in.example_unit);
  out->set_dp_clip_norm(in.dp_clip_norm);
  out->set_dp_noise_stddev(in.dp_noise_stddev);
}

void KeysToProto(const secagg::KeyAdvertisement& in, v1::SecAggKeys* out) {
  out->set_secagg_id(in.client);
  out->set_cipher_public(ToBytes(in.cipher_public));
  out->set_mask_public(ToBytes(in.mask_public));
  out->set_identity(in.identity);
  out->set_signature(ToBytes(in.signature));
}

absl::StatusOr<secagg::KeyAdvertisement> KeysFromProto(const v1::SecAggKeys& in,
                                                       absl::string_view field) {
  secagg::KeyAdvertisement out;
  out.client = in.secagg_id();
  absl::StatusOr<secagg::Key32> cipher =
      KeyFromBytes(in.cipher_public(), absl::StrCat(field, ".cipher_public"));
  if (!cipher.ok()) return cipher.status();
  absl::StatusOr<secagg::Key32> mask =
      KeyFromBytes(in.mask_public(), absl::StrCat(field, ".mask_public"));
  if (!mask.ok()) return mask.status();
  out.cipher_public = *cipher;
  out.mask_public = *mask;
  if (in.identity().size() > kMaxIdentityBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".identity has ", in.identity().size(),
                                                   " bytes, at most ", kMaxIdentityBytes));
  }
  if (in.signature().size() > kMaxSignatureBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".signature has ", in.signature().size(),
                                                   " bytes, at most ", kMaxSignatureBytes));
  }
  out.identity = in.identity();
  const auto* sig = reinterpret_cast<const uint8_t*>(in.signature().data());
  out.signature.assign(sig, sig + in.signature().size());
  return out;
}

void DirectoryToProto(const secagg::KeyDirectory& in, v1::SecAggTask* out) {
  for (const auto& [id, keys] : in.keys) {
    secagg::KeyAdvertisement entry = keys;
    entry.client = id;
    KeysToProto(entry, out->add_directory());
  }
  for (const auto& [id, digest] : in.digests) {
    v1::SecAggDigest* d = out->add_directory_digests();
    d->set_secagg_id(id);
    d->set_digest(ToBytes(digest));
  }
}

absl::StatusOr<secagg::KeyDirectory> DirectoryFromProto(const v1::SecAggTask& task) {
  secagg::KeyDirectory out;
  for (int i = 0; i < task.directory_size(); ++i) {
    const std::string field = absl::StrCat("secagg.directory[", i, "]");
    absl::StatusOr<secagg::KeyAdvertisement> keys = KeysFromProto(task.directory(i), field);
    if (!keys.ok()) return keys.status();
    if (!out.keys.emplace(keys->client, *keys).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".secagg_id ", keys->client, " is listed twice"));
    }
  }
  for (int i = 0; i < task.directory_digests_size(); ++i) {
    const std::string field = absl::StrCat("secagg.directory_digests[", i, "]");
    const v1::SecAggDigest& d = task.directory_digests(i);
    absl::StatusOr<secagg::Key32> digest = KeyFromBytes(d.digest(), absl::StrCat(field, ".digest"));
    if (!digest.ok()) return digest.status();
    if (out.keys.count(d.secagg_id()) != 0 || !out.digests.emplace(d.secagg_id(), *digest).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".secagg_id ", d.secagg_id(), " is listed twice"));
    }
  }
  return out;
}

void SharesToProto(const secagg::EncryptedShares& in, v1::SecAggShares* out) {
  for (const auto& [recipient, sealed] : in.ciphertexts) {
    v1::SecAggCiphertext* c = out->add_ciphertexts();
    c->set_peer(recipient);
    c->set_ciphertext(ToBytes(sealed));
  }
}

absl::StatusOr<secagg::EncryptedShares> SharesFromProto(const v1::SecAggShares& in,
                                                        absl::string_view field) {
  secagg::EncryptedShares out;
  for (int i = 0; i < in.ciphertexts_size(); ++i) {
    const v1::SecAggCiphertext& c = in.ciphertexts(i);
    const auto* p = reinterpret_cast<const uint8_t*>(c.ciphertext().data());
    if (!out.ciphertexts.emplace(c.peer(), secagg::Bytes(p, p + c.ciphertext().size())).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".ciphertexts[", i, "].peer ", c.peer(), " is listed twice"));
    }
  }
  return out;
}

void BundleToProto(const secagg::ShareBundle& in, v1::SecAggTask* out) {
  for (const auto& [from, sealed] : in.ciphertexts) {
    v1::SecAggCiphertext* c = out->add_bundle();
    c->set_peer(from);
    c->set_ciphertext(ToBytes(sealed));
  }
}

absl::StatusOr<secagg::ShareBundle> BundleFromProto(const v1::SecAggTask& task) {
  secagg::ShareBundle out;
  for (int i = 0; i < task.bundle_size(); ++i) {
    const v1::SecAggCiphertext& c = task.bundle(i);
    if (c.ciphertext().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("secagg.bundle[", i, "].ciphertext is empty"));
    }
    const auto* p = reinterpret_cast<const uint8_t*>(c.ciphertext().data());
    if (!out.ciphertexts.emplace(c.peer(), secagg::Bytes(p, p + c.ciphertext().size())).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("secagg.bundle[", i, "].peer ", c.peer(), " is listed twice"));
    }
  }
  return out;
}

void SurvivorListToProto(const secagg::SurvivorList& in, v1::SecAggTask* out) {
  for (int id : in.survivors) out->add_survivors(id);
}

absl::StatusOr<secagg::SurvivorList> SurvivorListFromProto(const v1::SecAggTask& task) {
  absl::StatusOr<std::vector<int>> survivors = IdsFromProto(task.survivors(), "secagg.survivors");
  if (!survivors.ok()) return survivors.status();
  return secagg::SurvivorList{.survivors = *std::move(survivors)};
}

absl::StatusOr<secagg::SurvivorSignature> SurvivorSignatureFromBytes(const std::string& in,
                                                                     int client) {
  if (in.size() > kMaxSignatureBytes) {
    return absl::InvalidArgumentError(absl::StrCat("SecAggSubmission.survivor_signature has ",
                                                   in.size(), " bytes, at most ",
                                                   kMaxSignatureBytes));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  return secagg::SurvivorSignature{.client = client, .signature = secagg::Bytes(p, p + in.size())};
}

void UnmaskRequestToProto(const secagg::UnmaskRequest& in, v1::SecAggTask* out) {
  for (int id : in.survivors) out->add_survivors(id);
  for (int id : in.dropped) out->add_dropped(id);
  for (const auto& [id, e] : in.signatures) {
    v1::SecAggEndorsement* p = out->add_signatures();
    secagg::KeyAdvertisement keys = e.keys;
    keys.client = id;
    KeysToProto(keys, p->mutable_keys());
    p->set_signature(ToBytes(e.signature));
  }
}

absl::StatusOr<secagg::UnmaskRequest> UnmaskRequestFromProto(const v1::SecAggTask& task) {
  secagg::UnmaskRequest out;
  absl::StatusOr<std::vector<int>> survivors = IdsFromProto(task.survivors(), "secagg.survivors");
  if (!survivors.ok()) return survivors.status();
  absl::StatusOr<std::vector<int>> dropped = IdsFromProto(task.dropped(), "secagg.dropped");
  if (!dropped.ok()) return dropped.status();
  out.survivors = *std::move(survivors);
  out.dropped = *std::move(dropped);
  for (int i = 0; i < task.signatures_size(); ++i) {
    const std::string field = absl::StrCat("secagg.signatures[", i, "]");
    const v1::SecAggEndorsement& e = task.signatures(i);
    absl::StatusOr<secagg::KeyAdvertisement> keys = KeysFromProto(e.keys(), field + ".keys");
    if (!keys.ok()) return keys.status();
    if (e.signature().size() > kMaxSignatureBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".signature has ", e.signature().size(),
                                                     " bytes, at most ", kMaxSignatureBytes));
    }
    const auto* p = reinterpret_cast<const uint8_t*>(e.signature().data());
    secagg::SurvivorEndorsement endorsement{
        .keys = *keys, .signature = secagg::Bytes(p, p + e.signature().size())};
    if (!out.signatures.emplace(keys->client, std::move(endorsement)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".keys.secagg_id ", keys->client, " is listed twice"));
    }
  }
  return out;
}

void UnmaskToProto(const secagg::UnmaskResponse& in, v1::SecAggUnmask* out) {
  for (const auto& [owner, share] : in.self_seed_shares) {
    ShareToProto(owner, share, out->add_self_seed_shares());
  }
  for (const auto& [owner, share] : in.mask_key_shares) {
    ShareToProto(owner, share, out->add_mask_key_shares());
  }
}

absl::StatusOr<secagg::UnmaskResponse> UnmaskFromProto(const v1::SecAggUnmask& in, int client,
                                                       absl::string_view field) {
  secagg::UnmaskResponse out;
  out.client = client;
  if (absl::Status s = ShamirSharesFromProto(
          in.self_seed_shares(), absl::StrCat(field, ".self_seed_shares"), out.self_seed_shares);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ShamirSharesFromProto(
          in.mask_key_shares(), absl::StrCat(field, ".mask_key_shares"), out.mask_key_shares);
      !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace fl::wire
