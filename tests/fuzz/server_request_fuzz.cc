// Fuzz target for the server's decoding of a client's requests into domain types, as the
// federation service (server/service/federation_service.cc) does it before anything reaches the
// engine: the bounds of server/service/input_limits.h, fl::FromProto of model specs and update
// encodings (fl/wire/proto_serde.h), and SecAggMessageFromProto (server/service/secagg_serde.h)
// with fl::wire's secure-aggregation parsers under it.
//
// Input: a selector byte, then the serialized request (protobuf wire format).
//   selector % 4: a JoinRequest, an UpdatePart (the metadata, a chunk or the final SHA-256 of
//     SubmitUpdate's stream), an EvaluationResult, a SecAggSubmission.
//   selector & 0x08: tight ClientInputLimits (a few bytes and entries each), so that refusals
//     are reached with small inputs; else the defaults.
// Bytes that do not parse are what gRPC refuses before the service; what parses gives a refusal
// (INVALID_ARGUMENT, saying why) or domain values, and those survive the trip back: a spec read
// by FromProto is the proto's tensors and converts back to the same spec; a cut text is a prefix
// of the sent one, within max_text_bytes plus the marker, and valid UTF-8 when the text was; a
// secure-aggregation body read is the body sent (keys, shares by peer, Shamir shares by owner,
// the signature), and one that is not names why in `malformed`.
//
// Compiled into the executable with the sanitizers: server/service/input_limits.cc,
// server/service/secagg_serde.cc, common/wire/src/proto_serde.cc,
// common/wire/src/secagg_serde.cc, common/src/model.cc, common/src/text.cc. The site profile of a
// join (SiteProfileFromProto) is private to federation_service.cc; its spec conversion is
// FromProto, fuzzed here.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fl/common/model.h"
#include "fl/common/text.h"
#include "fl/server/client_limits.h"
#include "fl/v1/federation.pb.h"
#include "fl/wire/proto_serde.h"
#include "fl/wire/secagg_serde.h"
#include "google/protobuf/stubs/logging.h"
#include "server/service/input_limits.h"
#include "server/service/secagg_serde.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

// Mutants that do not parse are the point: protobuf's log of each would drown the output.
[[maybe_unused]] const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

using server::ClientInputLimits;

constexpr std::string_view kTruncated = "... (truncated)";

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xe  ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

void CheckCut(const std::string& text, const ClientInputLimits& limits) {
  const std::string cut = server::CutText(text, limits);
  const auto max = static_cast<size_t>(limits.max_text_bytes);
  if (text.size() <= max) {
    Check(cut == text, "a text within max_text_bytes is kept whole");
    return;
  }
  Check(cut.size() >= kTruncated.size() && cut.ends_with(kTruncated), "a cut text is marked");
  const std::string_view kept(cut.data(), cut.size() - kTruncated.size());
  Check(kept.size() <= max, "a cut text keeps at most max_text_bytes");
  Check(std::string_view(text).starts_with(kept), "a cut text is a prefix of the text");
  if (ValidUtf8(text)) Check(ValidUtf8(cut), "a cut UTF-8 text stays UTF-8");
}

// FromProto of a spec the checks let through: its tensors as sent, and back to the same spec.
void CheckSpec(const v1::ModelSpec& proto) {
  absl::StatusOr<ModelSpec> spec = FromProto(proto);
  if (!spec.ok()) {
    CheckRefusal(spec.status(), absl::StatusCode::kInvalidArgument, "FromProto refuses a spec");
    return;
  }
  Check(static_cast<int>(spec->tensors().size()) == proto.tensors_size(),
        "a spec keeps every tensor");
  Check(spec->NumFloats() > 0 && spec->NumFloats() <= kMaxModelFloats,
        "a spec's size is within kMaxModelFloats");
  v1::ModelSpec again;
  ToProto(*spec, &again);
  absl::StatusOr<ModelSpec> back = FromProto(again);
  Check(back.ok() && *back == *spec, "a spec survives a round trip");
  // What admission says of it against a server's model.
  const ModelSpec server({{"w", {784, 10}}, {"b", {10}}});
  const std::string diff =
      DescribeSpecDifference(server, *spec, "the server's model", "this site's");
  Check(diff.empty() == (server == *spec), "a spec differs exactly when it is not the server's");
}

void Join(const v1::JoinRequest& req, const ClientInputLimits& limits) {
  if (absl::Status s = server::CheckJoinInput(req, limits); !s.ok()) {
    CheckRefusal(s, absl::StatusCode::kInvalidArgument, "CheckJoinInput refuses");
    return;
  }
  Check(static_cast<int64_t>(req.client_name().size()) <= limits.max_name_bytes &&
            req.capabilities_size() <= limits.max_capabilities,
        "a join within the limits");
  if (req.has_model_spec()) CheckSpec(req.model_spec());
}

void Update(const v1::UpdatePart& part, const ClientInputLimits& limits) {
  switch (part.part_case()) {
    case v1::UpdatePart::kMetadata: {
      const v1::UpdateMetadata& m = part.metadata();
      absl::Status bounded = server::CheckName(m.task_id(), "task_id", limits);
      if (bounded.ok()) bounded = server::CheckMetrics(m.metrics(), "the update's", limits);
      if (bounded.ok() && m.has_model_spec()) {
        bounded = server::CheckSpecInput(m.model_spec(), "the update's");
      }
      if (!bounded.ok()) {
        CheckRefusal(bounded, absl::StatusCode::kInvalidArgument, "an update's bounds refuse");
        return;
      }
      Check(static_cast<int64_t>(m.metrics().size()) <= limits.max_metrics,
            "metrics within the limits");
      if (m.has_model_spec()) CheckSpec(m.model_spec());
      CheckCut(m.decline_reason(), limits);
      std::optional<PayloadEncoding> e = FromProto(m.encoding());
      if (e.has_value()) Check(ToProto(*e) == m.encoding(), "an encoding survives a round trip");
      std::optional<UpdateEncoding> fit = FitEncodingFromProto(m.encoding());
      if (fit.has_value()) {
        Check(m.encoding() == v1::UpdateMetadata::ENCODING_UNSPECIFIED ||
                  ToProto(*fit) == m.encoding(),
              "a fit encoding survives a round trip");
      }
      return;
    }
    case v1::UpdatePart::kSha256: {
      const absl::Status s = server::CheckSha256Input(part.sha256());
      if (!s.ok()) CheckRefusal(s, absl::StatusCode::kInvalidArgument, "a SHA-256 is refused");
      return;
    }
    case v1::UpdatePart::kChunk:
    case v1::UpdatePart::PART_NOT_SET:
      return;  // the chunks are chunk_assembly_fuzz's
  }
}

void Evaluation(const v1::EvaluationResult& req, const ClientInputLimits& limits) {
  absl::Status bounded = server::CheckName(req.task_id(), "task_id", limits);
  if (bounded.ok()) bounded = server::CheckMetrics(req.metrics(), "the evaluation's", limits);
  if (!bounded.ok()) {
    CheckRefusal(bounded, absl::StatusCode::kInvalidArgument, "an evaluation's bounds refuse");
    return;
  }
  CheckCut(req.error(), limits);
}

std::string AsString(std::span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void SecAgg(const v1::SecAggSubmission& req, const ClientInputLimits& limits) {
  if (absl::Status s = server::CheckName(req.task_id(), "task_id", limits); !s.ok()) {
    CheckRefusal(s, absl::StatusCode::kInvalidArgument, "a task id is refused");
    return;
  }
  absl::StatusOr<server::SecAggMessage> m = server::SecAggMessageFromProto(req);
  if (!m.ok()) {
    CheckRefusal(m.status(), absl::StatusCode::kInvalidArgument, "a stage is refused");
    return;
  }
  Check(m->run_id == req.run_id() && m->round == req.round() && m->task_id == req.task_id(),
        "a message keeps its ids");
  const int bodies = m->keys.has_value() + m->shares.has_value() + m->unmask.has_value() +
                     m->survivor_signature.has_value() + !m->decline_reason.empty() +
                     !m->malformed.empty();
  Check(bodies == 1, "a message carries exactly one body, or why it has none");
  if (m->keys.has_value()) {
    Check(req.body_case() == v1::SecAggSubmission::kKeys, "keys come from keys");
    Check(m->keys->client == -1, "the engine sets the sender");
    Check(AsString(m->keys->cipher_public) == req.keys().cipher_public() &&
              AsString(m->keys->mask_public) == req.keys().mask_public() &&
              m->keys->identity == req.keys().identity() &&
              AsString(m->keys->signature) == req.keys().signature(),
          "keys are read as sent");
  }
  if (m->shares.has_value()) {
    Check(req.body_case() == v1::SecAggSubmission::kShares, "shares come from shares");
    Check(static_cast<int>(m->shares->ciphertexts.size()) == req.shares().ciphertexts_size(),
          "every peer's ciphertext is kept");
    for (const v1::SecAggCiphertext& c : req.shares().ciphertexts()) {
      auto it = m->shares->ciphertexts.find(c.peer());
      Check(it != m->shares->ciphertexts.end() && AsString(it->second) == c.ciphertext(),
            "a ciphertext is read as sent");
    }
  }
  if (m->unmask.has_value()) {
    Check(req.body_case() == v1::SecAggSubmission::kUnmask, "shares come from unmask");
    v1::SecAggUnmask again;
    wire::UnmaskToProto(*m->unmask, &again);
    Check(again.self_seed_shares_size() == req.unmask().self_seed_shares_size() &&
              again.mask_key_shares_size() == req.unmask().mask_key_shares_size(),
          "every Shamir share is kept");
    absl::StatusOr<secagg::UnmaskResponse> back = wire::UnmaskFromProto(again, -1);
    Check(back.ok() && back->self_seed_shares == m->unmask->self_seed_shares &&
              back->mask_key_shares == m->unmask->mask_key_shares,
          "Shamir shares survive a round trip");
  }
  if (m->survivor_signature.has_value()) {
    Check(AsString(m->survivor_signature->signature) == req.survivor_signature(),
          "a signature is read as sent");
  }
  if (!m->decline_reason.empty()) {
    Check(req.body_case() == v1::SecAggSubmission::kDeclineReason, "a decline comes from one");
    CheckCut(m->decline_reason, limits);
  }
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const uint8_t* bytes = data + 1;
  const int n = static_cast<int>(size - 1);
  fl::server::ClientInputLimits limits;
  if ((selector & 0x08) != 0) {
    limits = {.max_name_bytes = 4,
              .max_capabilities = 1,
              .max_metrics = 1,
              .max_metric_key_bytes = 2,
              .max_text_bytes = 3};
  }
  switch (selector % 4) {
    case 0: {
      fl::v1::JoinRequest req;
      if (req.ParseFromArray(bytes, n)) fl::fuzz::Join(req, limits);
      break;
    }
    case 1: {
      fl::v1::UpdatePart part;
      if (part.ParseFromArray(bytes, n)) fl::fuzz::Update(part, limits);
      break;
    }
    case 2: {
      fl::v1::EvaluationResult req;
      if (req.ParseFromArray(bytes, n)) fl::fuzz::Evaluation(req, limits);
      break;
    }
    case 3: {
      fl::v1::SecAggSubmission req;
      if (req.ParseFromArray(bytes, n)) fl::fuzz::SecAgg(req, limits);
      break;
    }
  }
  return 0;
}
