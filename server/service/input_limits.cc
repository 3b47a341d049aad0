#include "server/service/input_limits.h"

#include "absl/strings/str_cat.h"

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

absl::Status CheckText(const std::string& value, absl::string_view field,
                       const ClientInputLimits& limits) {
  if (static_cast<int64_t>(value.size()) > limits.max_text_bytes) {
    return TooLarge(field, static_cast<int64_t>(value.size()), "bytes", limits.max_text_bytes,
                    "max_text_bytes");
  }
  return absl::OkStatus();
}

absl::Status CheckJoinInput(const fl::v1::JoinRequest& req, const ClientInputLimits& limits) {
  if (absl::Status s = CheckName(req.client_name(), "client_name", limits); !s.ok()) return s;
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
