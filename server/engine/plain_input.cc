// A plain round's input (round_input.h): each update's weights, checked and staged as they
// stream (float16 / int8 changes decoded with the round's global model added back), then folded
// from the staging into the strategy's RoundAggregator, clipped first when the strategy bounds
// each change's norm (central DP, a norm bound).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/common/chunking.h"
#include "fl/common/crash_point.h"
#include "server/engine/round_input.h"
#include "server/engine/upload.h"

namespace fl::server::internal {

namespace {

using Encoding = UpdateMeta::Encoding;

class PlainInput final : public RoundInput {
 public:
  PlainInput(aggregation::Strategy& strategy, std::shared_ptr<const Model> global,
             UpdateEncoding encoding)
      : aggregator_(strategy.BeginRound(*global)),
        global_(std::move(global)),
        encoding_(encoding),
        clip_norm_(strategy.update_norm_bound()) {}

  absl::Status CheckUpdate(const UpdateMeta& meta) const override {
    if (meta.encoding == Encoding::kMaskedUint32 || meta.encoding == Encoding::kMaskedUint64) {
      return absl::InvalidArgumentError(
          absl::StrCat("update encoding ", PayloadEncodingName(meta.encoding),
                       " is for secure aggregation; round ", meta.round, " is not secure"));
    }
    if (meta.encoding != ToPayloadEncoding(encoding_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "update encoding ", PayloadEncodingName(meta.encoding), " is not the run's: round ",
          meta.round, " takes ", PayloadEncodingName(ToPayloadEncoding(encoding_)),
          " (update_encoding \"", UpdateEncodingName(encoding_), "\")"));
    }
    const int64_t num_floats = global_->spec().NumFloats();
    const int64_t expected = EncodedBytes(encoding_, num_floats);
    if (meta.payload_bytes != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "update payload is ", meta.payload_bytes, " bytes but the model has ", num_floats, " ",
          UpdateEncodingName(encoding_), " parameters (", expected, " bytes",
          encoding_ == UpdateEncoding::kInt8 ? " with a scale per chunk" : "", ")"));
    }
    if (meta.num_examples <= 0 || meta.num_examples > kMaxExamples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "update claims ", meta.num_examples, " examples; it must be in [1, ", kMaxExamples, "]"));
    }
    for (const auto& [k, v] : meta.metrics) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("update metric '", k, "' is not finite"));
      }
    }
    // What the strategy would refuse (q-FedAvg: a missing initial_loss), before the payload.
    return aggregator_->CheckUpdate(
        {.weight = static_cast<double>(meta.num_examples), .metrics = meta.metrics});
  }

  int64_t value_bytes() const override {
    switch (encoding_) {
      case UpdateEncoding::kFloat16:
        return 2;
      case UpdateEncoding::kInt8:
        return 1;
      case UpdateEncoding::kFloat32:
        break;
    }
    return 4;
  }

  // One decoded chunk, at most what the payload holds: a small model's upload does not allocate
  // (and fault in) a whole chunk's buffer, 4 MiB for int8. From the payload size (checked against
  // the model before the upload began).
  size_t scratch_values(int64_t payload_bytes) const override {
    const int64_t payload_values = payload_bytes / value_bytes();
    return static_cast<size_t>(
        std::max<int64_t>(1, std::min(ValuesPerChunk(encoding_), payload_values)));
  }

  absl::StatusOr<StagedChunk> Stage(int64_t offset, std::string_view data,
                                    std::span<float> scratch) const override {
    if (encoding_ == UpdateEncoding::kFloat32) {
      const size_t n = data.size() / sizeof(float);
      if (n > scratch.size()) return absl::InternalError("a float32 chunk larger than its buffer");
      std::memcpy(scratch.data(), data.data(), n * sizeof(float));
      if (absl::Status s = CheckFinite(scratch.first(n), offset / 4); !s.ok()) return s;
      return StagedChunk{.offset = offset, .data = data};
    }
    // Each wire chunk is one codec chunk, and a full codec chunk is kMaxChunkBytes of every
    // encoding, so the chunk's index and first parameter follow from its offset.
    const int64_t per = ValuesPerChunk(encoding_);
    const int64_t total = global_->spec().NumFloats();
    const int64_t first = offset / kMaxChunkBytes * per;
    const int64_t n = std::min(per, total - first);
    if (offset % kMaxChunkBytes != 0 || n <= 0 || static_cast<size_t>(n) > scratch.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(UpdateEncodingName(encoding_), " chunk at offset ", offset,
                       " does not start a codec chunk (every ", kMaxChunkBytes, " bytes)"));
    }
    std::span<float> values = scratch.first(static_cast<size_t>(n));
    if (absl::Status s =
            DecodeChunk(encoding_, std::as_bytes(std::span<const char>(data.data(), data.size())),
                        first, values);
        !s.ok()) {
      return s;
    }
    std::span<const float> g = global_->data().subspan(static_cast<size_t>(first), values.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] += g[i];
    if (absl::Status s = CheckFinite(values, first); !s.ok()) return s;
    return StagedChunk{.offset = first * static_cast<int64_t>(sizeof(float)),
                       .data = std::string_view(reinterpret_cast<const char*>(values.data()),
                                                values.size() * sizeof(float))};
  }

  absl::Status Fold(const UploadState& up, bool& spoiled) override {
    bool touched = false;
    absl::Status s = FoldStaged(up, touched);
    // A streaming aggregate that took part of it is spoiled; one that keeps updates apart forgets
    // it, and one it was refused by (BeginUpdate) never saw it.
    spoiled = !s.ok() && touched && !aggregator_->keeps_updates_apart();
    return s;
  }

  int num_accepted() const override {
    return aggregator_ != nullptr ? aggregator_->num_accepted() : 0;
  }

  absl::StatusOr<Model> Finish(std::span<const aggregation::SiteFailure> failures,
                               std::optional<Model>& state) override {
    for (const aggregation::SiteFailure& f : failures) aggregator_->Failed(f);
    CrashPoint("aggregate");
    absl::StatusOr<Model> next = aggregator_->Finish();
    if (next.ok()) state = aggregator_->TakeState();
    return next;
  }

  void DropModels() override {
    aggregator_.reset();
    global_.reset();
  }

 private:
  // The staged weights folded into the aggregator, clipped when the strategy bounds each change
  // (a first pass over the staging measures the change's norm: dp/clipping.h's StreamingClip).
  // `touched`: whether any piece reached the aggregator (a refusal at BeginUpdate, e.g. a missing
  // metric, touches nothing).
  absl::Status FoldStaged(const UploadState& up, bool& touched) const {
    std::vector<float> buf(static_cast<size_t>(kMaxChunkBytes / sizeof(float)));
    // Calls `visit(first float, values)` for each piece of the staged payload.
    auto for_each_piece = [&](auto visit) -> absl::Status {
      for (int64_t off = 0; off < up.staged_bytes;) {
        size_t n = static_cast<size_t>(std::min<int64_t>(kMaxChunkBytes, up.staged_bytes - off));
        if (up.staged == nullptr) return absl::InternalError("the update's staging is gone");
        if (absl::Status s = up.staged->Read(
                off, std::as_writable_bytes(std::span<float>(buf.data(), n / sizeof(float))));
            !s.ok()) {
          return s;
        }
        visit(off / static_cast<int64_t>(sizeof(float)),
              std::span<float>(buf.data(), n / sizeof(float)));
        off += static_cast<int64_t>(n);
      }
      return absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<aggregation::UpdateSink>> sink = aggregator_->BeginUpdate(
        {.weight = static_cast<double>(up.num_examples), .metrics = up.metrics});
    if (!sink.ok()) return sink.status();
    absl::Status written;  // the first write that failed
    auto write = [&](int64_t first, std::span<const float> v) {
      touched = true;
      if (written.ok()) written = (*sink)->Write(first, v);
    };
    auto accept = [&](absl::Status read) {
      if (!read.ok()) return read;
      if (!written.ok()) return written;
      return (*sink)->Accept();
    };
    if (!(clip_norm_ > 0)) return accept(for_each_piece(write));
    aggregation::dp::StreamingClip clip(global_->data(), clip_norm_);
    absl::Status measured =
        for_each_piece([&](int64_t first, std::span<float> v) { clip.Measure(first, v); });
    if (!measured.ok()) return measured;
    return accept(for_each_piece([&](int64_t first, std::span<float> v) {
      clip.Apply(first, v);
      write(first, v);
    }));
  }

  std::unique_ptr<aggregation::RoundAggregator> aggregator_;
  std::shared_ptr<const Model> global_;
  const UpdateEncoding encoding_;
  const double clip_norm_;  // the strategy's update_norm_bound(); 0: no clipping
};

}  // namespace

std::unique_ptr<RoundInput> MakePlainInput(aggregation::Strategy& strategy,
                                           std::shared_ptr<const Model> global,
                                           UpdateEncoding encoding) {
  return std::make_unique<PlainInput>(strategy, std::move(global), encoding);
}

}  // namespace fl::server::internal
