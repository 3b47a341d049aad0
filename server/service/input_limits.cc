#include "server/service/input_limits.h"

#include "absl/strings/str_cat.h"
#include "fl/common/text.h"

namespace fl::server {
namespace {

absl::Status TooLarge(absl::string_view what, int64_t size, absl::string_view unit, int64_t max,
                      absl::string_view option) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is ", size, " ", unit, "; the server takes at most ", max, " (limits.", option, ")"));
}

}  // namespace

absl::Status CheckName(const std::string& value, absl::string_view field,
                       const ClientInputLimits& limits) {
  if (static_cast<int64_t>(value.size()) > limits.max_name_bytes) {
    return TooLarge(field, static_cast<int64_t>(value.size()), "bytes", limits.max_name_bytes,
                    "max_name_bytes");
  }
  return absl::OkStatus();
}

std::string CutText(absl::string_view text, const ClientInputLimits& limits) {
  return CutUtf8(std::string_view(text.data(), text.size()),
                 static_cast<size_t>(limits.max_text_bytes));
}

absl::Status CheckSpecInput(const fl::v1::ModelSpec& spec, absl::string_view whose) {
  if (spec.tensors_size() > kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat(whose, " model spec lists ", spec.tensors_size(),
                                                   " tensors; at most ", kMaxTensors));
  }
  for (int i = 0; i < spec.tensors_size(); ++i) {
    const fl::v1::TensorSpec& t = spec.tensors(i);
    if (t.name().size() > kMaxTensorNameBytes || t.shape_size() > kMaxTensorDims) {
      return absl::InvalidArgumentError(absl::StrCat(
          whose, " model spec's tensor ", i, " has a name of ", t.name().size(), " bytes and ",
          t.shape_size(), " dimensions; at most ", kMaxTensorNameBytes, " and ", kMaxTensorDims));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSha256Input(const std::string& hex) {
  bool ok = hex.size() == 64;
  for (char c : hex) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an update's SHA-256 must be 64 lowercase hex digits; got ", hex.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckJoinInput(const fl::v1::JoinRequest& req, const ClientInputLimits& limits) {
  if (absl::Status s = CheckName(req.client_name(), "client_name", limits); !s.ok()) return s;
  if (absl::Status s = CheckSpecInput(req.model_spec(), "the join's"); !s.ok()) return s;
  if (absl::Status s = CheckName(req.sdk_version(), "sdk_version", limits); !s.ok()) return s;
  if (req.capabilities_size() > limits.max_capabilities) {
    return TooLarge("the join's capability list", req.capabilities_size(), "entries",
                    limits.max_capabilities, "max_capabilities");
  }
  for (const std::string& c : req.capabilities()) {
    if (absl::Status s = CheckName(c, "a capability", limits); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckMetrics(const google::protobuf::Map<std::string, double>& metrics,
                          absl::string_view whose, const ClientInputLimits& limits) {
  if (static_cast<int64_t>(metrics.size()) > limits.max_metrics) {
    return TooLarge(absl::StrCat(whose, " metrics map"), static_cast<int64_t>(metrics.size()),
                    "entries", limits.max_metrics, "max_metrics");
  }
  for (const auto& [key, value] : metrics) {
    if (static_cast<int64_t>(key.size()) > limits.max_metric_key_bytes) {
      return TooLarge(absl::StrCat("a key of ", whose, " metrics"),
                      static_cast<int64_t>(key.size()), "bytes", limits.max_metric_key_bytes,
                      "max_metric_key_bytes");
    }
  }
  return absl::OkStatus();
}

}  // namespace fl::server
