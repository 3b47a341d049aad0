// Fuzz target for chunk assembly: an update streaming into the server (the checks of
// UploadImpl::AddChunk and Finish, server/engine/uploads.cc, over a plain round's or a secure
// round's RoundInput) and a model downloaded by a site (GrpcTransport::Download's assembly,
// client_sdk/src/grpc_transport.cc), both on fl::ChunkAssembler.
//
// Input: a kind byte, a size byte, a flags byte, optional fields, then chunk records.
//   kind % 6: an upload of float32 weights, a float16 or int8 change (the update codecs as the
//     server decodes them), masked words of 32 or 64 bits (a secure round at its masked-input
//     stage), or a download of float32 weights.
//   size: the model holds 1 + size values (one tensor).
//   flags: 0x01 payload_bytes is a u32 field (else the right size for the kind); 0x02
//     num_examples is a u32 field (else 10, and 0 for masked words); 0x04 the final SHA-256 is
//     wrong; 0x08 the global model holds FLT_MAX; 0x10 the strategy bounds each change's norm;
//     0x20 a metric "loss" whose bits are a u64 field.
//   records: a flags byte (0x01: the offset is a u32 field, else the bytes received so far; 0x80:
//     the stream ends here without a SHA-256), then a u16 length and the chunk's bytes.
// As the product does: CheckUpdate, then for each chunk ChunkAssembler::Add, RoundInput::Stage
// and the staging's Write, then at the end Finish with the SHA-256 of the chunks sent, Fold and
// (plain rounds) the aggregate. Any input gives a refusal (INVALID_ARGUMENT; DATA_LOSS for a
// truncated payload) or an accepted update; a fold reads only staged bytes; an accepted update
// staged the whole model (float32 weights, or every masked word); an aggregate is finite; the
// masked sum's words stay below 2^m; a completed download is the bytes sent.
//
// Compiled into the executable with the sanitizers: common/src/chunking.cc,
// common/src/update_codec.cc, server/engine/plain_input.cc, server/engine/secagg_clients.cc
// (SecAggRound's Stage, CheckUpdate and FoldMasked). The strategy, the secure-aggregation
// session and the rest of the engine come from the (unsanitized) libraries.
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/wrappers.h"
#include "fl/common/chunking.h"
#include "fl/common/crypto.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"
#include "fl/server/staging.h"
#include "server/engine/round_input.h"
#include "server/engine/secagg_round.h"
#include "server/engine/upload.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

using server::UpdateMeta;
using server::internal::RoundInput;
using server::internal::SecAggRound;
using server::internal::StagedChunk;
using server::internal::UploadState;

enum class Kind { kFloat32, kFloat16, kInt8, kMasked32, kMasked64, kDownload };
constexpr int kSecAggClients = 3;

// An upload's staging in memory; the fold must read only what was written.
class MemoryStaging final : public server::StagedUpload {
 public:
  absl::Status Write(int64_t offset, std::span<const std::byte> bytes) override {
    Check(offset >= 0 && offset <= static_cast<int64_t>(bytes_.size()),
          "chunks are staged without gaps");
    const size_t end = static_cast<size_t>(offset) + bytes.size();
    if (end > bytes_.size()) bytes_.resize(end);
    if (!bytes.empty()) std::memcpy(bytes_.data() + offset, bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  absl::Status Read(int64_t offset, std::span<std::byte> out) const override {
    Check(offset >= 0 && static_cast<size_t>(offset) + out.size() <= bytes_.size(),
          "a fold reads only staged bytes");
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return absl::OkStatus();
  }

 private:
  std::vector<std::byte> bytes_;
};

secagg::SecAggParams SecAggParamsFor(int modulus_bits) {
  absl::StatusOr<secagg::SecAggParams> p =
      secagg::DefaultSecAggParams(kSecAggClients, modulus_bits, /*max_weight=*/100);
  Check(p.ok(), "the fixed secure-aggregation parameters are valid");
  return *p;
}

// Fixed key pairs of the round's clients (made once: only their public halves are used).
const std::vector<secagg::KeyAdvertisement>& Advertisements() {
  static const std::vector<secagg::KeyAdvertisement> keys = [] {
    std::vector<secagg::KeyAdvertisement> out;
    std::unique_ptr<secagg::RandomSource> rng = secagg::MakeDeterministicRandomSource(1);
    for (int c = 0; c < kSecAggClients; ++c) {
      absl::StatusOr<secagg::X25519KeyPair> cipher = secagg::GenerateX25519KeyPair(*rng);
      absl::StatusOr<secagg::X25519KeyPair> mask = secagg::GenerateX25519KeyPair(*rng);
      Check(cipher.ok() && mask.ok(), "the fixed key pairs are made");
      out.push_back({.client = c,
                     .cipher_public = cipher->public_key,
                     .mask_public = mask->public_key,
                     .identity = {},
                     .signature = {}});
    }
    return out;
  }();
  return keys;
}

// A server session of kSecAggClients clients at the masked-input stage: every client advertised
// keys and sent (opaque) shares to its neighbours.
std::unique_ptr<secagg::ServerSession> SessionAtMaskedInput(const secagg::SecAggParams& params,
                                                            size_t dimension) {
  absl::StatusOr<std::unique_ptr<secagg::ServerSession>> session =
      secagg::ServerSession::Create(params, dimension);
  Check(session.ok(), "the session is made");
  for (const secagg::KeyAdvertisement& keys : Advertisements()) {
    Check((*session)->ReceiveKeys(keys).ok(), "the fixed keys are taken");
  }
  Check((*session)->CloseAdvertiseKeys().ok(), "stage 1 closes");
  for (int c = 0; c < kSecAggClients; ++c) {
    secagg::EncryptedShares shares{.client = c, .ciphertexts = {}};
    for (int to : (*session)->graph().Neighbors(c)) {
      shares.ciphertexts[to] = secagg::Bytes(secagg::kSealedShareBytes, 0);
    }
    Check((*session)->ReceiveShares(shares).ok(), "the opaque shares are taken");
  }
  Check((*session)->CloseShareKeys().ok(), "stage 2 closes");
  return *std::move(session);
}

std::shared_ptr<const Model> GlobalModel(int64_t values, bool huge) {
  auto model = std::make_shared<Model>(ModelSpec({{"w", {values}}}));
  std::span<float> w = model->data();
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
  if (huge) w[0] = FLT_MAX;
  return model;
}

void Download(int64_t values, uint8_t flags, Reader& in) {
  Model model(ModelSpec({{"w", {values}}}));
  ChunkAssembler assembler(model.NumBytes());
  auto* dst = reinterpret_cast<char*>(model.data().data());
  std::string sent;
  while (!in.empty()) {
    const uint8_t record = in.U8();
    const int64_t offset = (record & 0x01) != 0 ? in.U32() : assembler.received();
    const std::string_view data = in.Record();
    if ((record & 0x80) != 0) return;
    if (absl::Status s = assembler.Add(offset, data); !s.ok()) {
      CheckRefusal(s, absl::StatusCode::kInvalidArgument, "a download refuses a chunk");
      return;
    }
    Check(offset + static_cast<int64_t>(data.size()) <= model.NumBytes(),
          "an accepted chunk lies within the model");
    std::memcpy(dst + offset, data.data(), data.size());
    sent.append(data);
  }
  const std::string sha = (flags & 0x04) != 0 ? std::string(64, '0') : Sha256Hex(sent);
  if (absl::Status s = assembler.Finish(sha); !s.ok()) {
    CheckRefusal(
        s, assembler.complete() ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kDataLoss,
        "a download refuses a truncated or altered payload");
    return;
  }
  Check(sent.size() == static_cast<size_t>(model.NumBytes()) &&
            std::memcmp(sent.data(), dst, sent.size()) == 0,
        "a completed download is the bytes sent");
}

void Upload(Kind kind, int64_t values, uint8_t flags, Reader& in) {
  const bool masked = kind == Kind::kMasked32 || kind == Kind::kMasked64;
  std::shared_ptr<const Model> global = GlobalModel(values, (flags & 0x08) != 0);
  std::unique_ptr<aggregation::Strategy> strategy = aggregation::MakeFedAvg();
  if ((flags & 0x10) != 0) {
    absl::StatusOr<std::unique_ptr<aggregation::Strategy>> bounded =
        aggregation::MakeNormBound(std::move(strategy), 1.0);
    Check(bounded.ok(), "the norm bound wraps FedAvg");
    strategy = *std::move(bounded);
  }

  UpdateMeta meta;
  meta.run_id = 1;
  meta.round = 1;
  meta.task_id = "r1.a0.c0";
  std::unique_ptr<RoundInput> input;
  SecAggRound* secure = nullptr;
  if (masked) {
    auto round = std::make_unique<SecAggRound>(*strategy, global);
    round->params = SecAggParamsFor(kind == Kind::kMasked64 ? 64 : 32);
    round->dimension = static_cast<size_t>(values);
    for (int c = 0; c < kSecAggClients; ++c) {
      round->client_of.push_back("c" + std::to_string(c));
      round->id_of[round->client_of.back()] = c;
    }
    round->session = SessionAtMaskedInput(round->params, round->dimension);
    round->stage = server::internal::SecAggStage::kMaskedInput;
    meta.encoding = kind == Kind::kMasked64 ? UpdateMeta::Encoding::kMaskedUint64
                                            : UpdateMeta::Encoding::kMaskedUint32;
    meta.payload_bytes =
        static_cast<int64_t>(secagg::EncodedWords(round->params, round->dimension)) *
        (round->params.modulus_bits / 8);
    secure = round.get();
    input = std::move(round);
  } else {
    const UpdateEncoding encoding = kind == Kind::kFloat16 ? UpdateEncoding::kFloat16
                                    : kind == Kind::kInt8  ? UpdateEncoding::kInt8
                                                           : UpdateEncoding::kFloat32;
    meta.encoding = ToPayloadEncoding(encoding);
    meta.payload_bytes = EncodedBytes(encoding, values);
    meta.num_examples = 10;
    input = server::internal::MakePlainInput(*strategy, global, encoding);
  }
  if ((flags & 0x01) != 0) meta.payload_bytes = in.U32();
  if ((flags & 0x02) != 0) meta.num_examples = static_cast<int32_t>(in.U32());
  if ((flags & 0x20) != 0) {
    const uint64_t bits = in.U64();
    double loss;
    std::memcpy(&loss, &bits, sizeof(loss));
    meta.metrics["loss"] = loss;
  }
  if (absl::Status s = input->CheckUpdate(meta); !s.ok()) {
    CheckRefusal(s, absl::StatusCode::kInvalidArgument, "CheckUpdate refuses");
    return;
  }

  // As UploadImpl does (server/engine/engine_impl.h, uploads.cc).
  ChunkAssembler assembler(meta.payload_bytes, input->value_bytes());
  std::vector<float> scratch(input->scratch_values(meta.payload_bytes));
  UploadState up;
  up.client_id = "c0";
  up.task_id = meta.task_id;
  up.num_examples = meta.num_examples;
  up.metrics = meta.metrics;
  up.staged = std::make_unique<MemoryStaging>();
  Sha256 sent;
  while (!in.empty()) {
    const uint8_t record = in.U8();
    const int64_t offset = (record & 0x01) != 0 ? in.U32() : assembler.received();
    const std::string_view data = in.Record();
    if ((record & 0x80) != 0) return;  // abandoned: the round refuses it at its close
    absl::Status why = assembler.Add(offset, data);
    std::optional<StagedChunk> staged;
    if (why.ok()) {
      absl::StatusOr<StagedChunk> checked = input->Stage(offset, data, scratch);
      if (checked.ok()) {
        staged = *checked;
      } else {
        why = checked.status();
      }
    }
    if (!why.ok()) {
      CheckRefusal(why, absl::StatusCode::kInvalidArgument, "a chunk is refused");
      return;
    }
    Check(up.staged
              ->Write(staged->offset, std::as_bytes(std::span<const char>(staged->data.data(),
                                                                          staged->data.size())))
              .ok(),
          "the memory staging writes");
    up.bytes_received += static_cast<int64_t>(data.size());
    up.staged_bytes += static_cast<int64_t>(staged->data.size());
    sent.Update(data);
  }
  const std::string sha = (flags & 0x04) != 0 ? std::string(64, '0') : sent.FinishHex();
  if (absl::Status s = assembler.Finish(sha); !s.ok()) {
    CheckRefusal(
        s, assembler.complete() ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kDataLoss,
        "Finish refuses a truncated or altered payload");
    return;
  }
  Check(up.staged_bytes == (masked ? meta.payload_bytes : global->NumBytes()),
        "a whole update stages the whole model");
  bool spoiled = false;
  if (absl::Status s = input->Fold(up, spoiled); !s.ok()) {
    Check(!s.message().empty(), "a refused fold says why");
    return;
  }
  if (masked) {
    const uint64_t limit = secure->params.modulus_bits == 64
                               ? ~uint64_t{0}
                               : (uint64_t{1} << secure->params.modulus_bits) - 1;
    for (uint64_t word : secure->session->accumulator()) {
      Check(word <= limit, "the masked sum stays below 2^m");
    }
    return;
  }
  std::optional<Model> state;
  absl::StatusOr<Model> next = input->Finish({}, state);
  if (!next.ok()) {
    Check(!next.status().message().empty(), "a refused aggregate says why");
    return;
  }
  Check(next->spec() == global->spec(), "the aggregate has the model's spec");
  for (float v : next->data()) Check(std::isfinite(v), "the aggregate is finite");
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::fuzz::Kind;
  fl::fuzz::Reader in(data, size);
  const auto kind = static_cast<Kind>(in.U8() % 6);
  const int64_t values = 1 + in.U8();
  const uint8_t flags = in.U8();
  if (kind == Kind::kDownload) {
    fl::fuzz::Download(values, flags, in);
  } else {
    fl::fuzz::Upload(kind, values, flags, in);
  }
  return 0;
}
