#include "server/service/secagg_serde.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "fl/wire/secagg_serde.h"

namespace fl::server {

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
    case Task::Kind::kSecAggConsistency:
      return fl::v1::Task::SECAGG_CONSISTENCY;
    case Task::Kind::kSecAggUnmask:
      return fl::v1::Task::SECAGG_UNMASK;
    case Task::Kind::kStatistics:
      return fl::v1::Task::STATISTICS;
  }
  return fl::v1::Task::WAIT;
}

void SecAggTaskToProto(const SecAggTaskInfo& info, fl::v1::SecAggTask* out) {
  wire::ParamsToProto(info.round, out->mutable_params());
  out->set_secagg_id(info.secagg_id);
  wire::DirectoryToProto(info.directory, out);
  wire::BundleToProto(info.bundle, out);
  wire::SurvivorListToProto(info.survivors, out);
  wire::UnmaskRequestToProto(info.unmask, out);
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
    case fl::v1::Task::SECAGG_CONSISTENCY:
      m.stage = Task::Kind::kSecAggConsistency;
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
      absl::StatusOr<secagg::KeyAdvertisement> keys =
          wire::KeysFromProto(in.keys(), "SecAggSubmission.keys");
      if (!keys.ok()) {
        m.malformed = std::string(keys.status().message());
        break;
      }
      m.keys = *keys;
      m.keys->client = -1;  // the engine sets it from its own map
      break;
    }
    case fl::v1::SecAggSubmission::kShares: {
      absl::StatusOr<secagg::EncryptedShares> shares =
          wire::SharesFromProto(in.shares(), "SecAggSubmission.shares");
      if (!shares.ok()) {
        m.malformed = std::string(shares.status().message());
        break;
      }
      m.shares = *std::move(shares);
      break;
    }
    case fl::v1::SecAggSubmission::kUnmask: {
      absl::StatusOr<secagg::UnmaskResponse> unmask =
          wire::UnmaskFromProto(in.unmask(), /*client=*/-1, "SecAggSubmission.unmask");
      if (!unmask.ok()) {
        m.malformed = std::string(unmask.status().message());
        break;
      }
      m.unmask = *std::move(unmask);
      break;
    }
    case fl::v1::SecAggSubmission::kSurvivorSignature: {
      absl::StatusOr<secagg::SurvivorSignature> signature =
          wire::SurvivorSignatureFromBytes(in.survivor_signature(), /*client=*/-1);
      if (!signature.ok()) {
        m.malformed = std::string(signature.status().message());
        break;
      }
      m.survivor_signature = *std::move(signature);
      break;
    }
    case fl::v1::SecAggSubmission::kDeclineReason:
      m.decline_reason = in.decline_reason();
      if (m.decline_reason.empty()) m.decline_reason = "no reason given";
      break;
    case fl::v1::SecAggSubmission::BODY_NOT_SET:
      m.malformed =
          "SecAggSubmission carries no body (keys, shares, survivor_signature, unmask or "
          "decline_reason)";
      break;
  }
  return m;
}

}  // namespace fl::server
