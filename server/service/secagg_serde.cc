#include "server/service/secagg_serde.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/secagg/shamir.h"

namespace fl::server {
namespace {

absl::StatusOr<secagg::Key32> Key(const std::string& bytes, const char* field) {
  secagg::Key32 key{};
  if (bytes.size() != key.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SecAggSubmission.", field, " must be 32 bytes, got ", bytes.size()));
  }
  std::copy(bytes.begin(), bytes.end(), key.begin());
  return key;
}

absl::Status Shares(const google::protobuf::RepeatedPtrField<fl::v1::SecAggShare>& in,
                    const char* field, std::map<int, secagg::ShamirShare>& out) {
  for (const fl::v1::SecAggShare& s : in) {
    if (s.y_size() != secagg::kShamirPieces) {
      return absl::InvalidArgumentError(
          absl::StrCat("SecAggSubmission.unmask.", field, " of owner ", s.owner(), " has ",
                       s.y_size(), " y values, expected ", secagg::kShamirPieces));
    }
    secagg::ShamirShare share;
    share.x = s.x();
    for (int i = 0; i < secagg::kShamirPieces; ++i) {
      if (s.y(i) >= secagg::kShamirPrime) {
        return absl::InvalidArgumentError(
            absl::StrCat("SecAggSubmission.unmask.", field, " of owner ", s.owner(), ": y[", i,
                         "] = ", s.y(i), " is outside the field (must be < 2^61 - 1)"));
      }
      share.y[i] = s.y(i);
    }
    if (!out.emplace(s.owner(), share).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("SecAggSubmission.unmask.", field, " lists owner ", s.owner(), " twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

fl::v1::Task::Kind ToProtoKind(Task::Kind kind) {
  switch (kind) {
    case Task::Kind::kWait:
      return fl::v1::Task::WAIT;
    case Task::Kind::kFit:
      return fl::v1::Task::FIT;
    case Task::Kind::kDone:
      return fl::v1::Task::DONE;
    case Task::Kind::kEvaluate:
      return fl::v1::Task::EVALUATE;
    case Task::Kind::kSecAggAdvertise:
      return fl::v1::Task::SECAGG_ADVERTISE_KEYS;
    case Task::Kind::kSecAggShare:
      return fl::v1::Task::SECAGG_SHARE_KEYS;
    case Task::Kind::kSecAggMaskedInput:
      return fl::v1::Task::SECAGG_MASKED_INPUT;
    case Task::Kind::kSecAggUnmask:
      return fl::v1::Task::SECAGG_UNMASK;
    case Task::Kind::kStatistics:
      return fl::v1::Task::STATISTICS;
  }
  return fl::v1::Task::WAIT;
}

void SecAggTaskToProto(const SecAggTaskInfo& info, fl::v1::SecAggTask* out) {
  fl::v1::SecAggParams* p = out->mutable_params();
  p->set_num_clients(info.params.num_clients);
  p->set_num_neighbors(info.params.num_neighbors);
  p->set_threshold(info.params.threshold);
  p->set_clip_range(info.params.clip_range);
  p->set_quantization_bits(info.params.quantization_bits);
  p->set_modulus_bits(info.params.modulus_bits);
  p->set_max_weight(info.params.max_weight);
  p->set_graph_seed(info.params.graph_seed);
  p->set_example_unit(info.example_unit);
  p->set_dp_clip_norm(info.dp_clip_norm);
  p->set_dp_noise_stddev(info.dp_noise_stddev);
  out->set_secagg_id(info.secagg_id);
  for (const auto& [id, keys] : info.directory.keys) {
    fl::v1::SecAggKeys* k = out->add_directory();
    k->set_secagg_id(id);
    k->set_cipher_public(keys.cipher_public.data(), keys.cipher_public.size());
    k->set_mask_public(keys.mask_public.data(), keys.mask_public.size());
  }
  for (const auto& [from, sealed] : info.bundle.ciphertexts) {
    fl::v1::SecAggCiphertext* c = out->add_bundle();
    c->set_peer(from);
    c->set_ciphertext(sealed.data(), sealed.size());
  }
  for (int id : info.unmask.survivors) out->add_survivors(id);
  for (int id : info.unmask.dropped) out->add_dropped(id);
}

absl::StatusOr<SecAggMessage> SecAggMessageFromProto(const fl::v1::SecAggSubmission& in) {
  SecAggMessage m;
  m.run_id = in.run_id();
  m.round = in.round();
  m.task_id = in.task_id();
  switch (in.stage()) {
    case fl::v1::Task::SECAGG_ADVERTISE_KEYS:
      m.stage = Task::Kind::kSecAggAdvertise;
      break;
    case fl::v1::Task::SECAGG_SHARE_KEYS:
      m.stage = Task::Kind::kSecAggShare;
      break;
    case fl::v1::Task::SECAGG_MASKED_INPUT:
      m.stage = Task::Kind::kSecAggMaskedInput;
      break;
    case fl::v1::Task::SECAGG_UNMASK:
      m.stage = Task::Kind::kSecAggUnmask;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("SecAggSubmission.stage must be a SECAGG_* kind, got ",
                       fl::v1::Task::Kind_Name(in.stage())));
  }
  switch (in.body_case()) {
    case fl::v1::SecAggSubmission::kKeys: {
      secagg::KeyAdvertisement keys;
      absl::StatusOr<secagg::Key32> cipher = Key(in.keys().cipher_public(), "keys.cipher_public");
      if (!cipher.ok()) return cipher.status();
      absl::StatusOr<secagg::Key32> mask = Key(in.keys().mask_public(), "keys.mask_public");
      if (!mask.ok()) return mask.status();
      keys.cipher_public = *cipher;
      keys.mask_public = *mask;
      m.keys = keys;
      break;
    }
    case fl::v1::SecAggSubmission::kShares: {
      secagg::EncryptedShares shares;
      for (const fl::v1::SecAggCiphertext& c : in.shares().ciphertexts()) {
        secagg::Bytes sealed(c.ciphertext().begin(), c.ciphertext().end());
        if (!shares.ciphertexts.emplace(c.peer(), std::move(sealed)).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("SecAggSubmission.shares.ciphertexts lists peer ", c.peer(), " twice"));
        }
      }
      m.shares = std::move(shares);
      break;
    }
    case fl::v1::SecAggSubmission::kUnmask: {
      secagg::UnmaskResponse unmask;
      if (absl::Status s =
              Shares(in.unmask().self_seed_shares(), "self_seed_shares", unmask.self_seed_shares);
          !s.ok()) {
        return s;
      }
      if (absl::Status s =
              Shares(in.unmask().mask_key_shares(), "mask_key_shares", unmask.mask_key_shares);
          !s.ok()) {
        return s;
      }
      m.unmask = std::move(unmask);
      break;
    }
    case fl::v1::SecAggSubmission::kDeclineReason:
      m.decline_reason = in.decline_reason();
      if (m.decline_reason.empty()) m.decline_reason = "no reason given";
      break;
    case fl::v1::SecAggSubmission::BODY_NOT_SET:
      return absl::InvalidArgumentError(
          "SecAggSubmission carries no body (keys, shares, unmask or decline_reason)");
  }
  return m;
}

}  // namespace fl::server
