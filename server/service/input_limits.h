// Checks of a client's requests against ClientInputLimits (fl/server/client_limits.h), before
// anything in them is logged, stored or handed to the engine.
#ifndef FL_SERVER_SERVICE_INPUT_LIMITS_H_
#define FL_SERVER_SERVICE_INPUT_LIMITS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fl/server/client_limits.h"
#include "fl/v1/federation.pb.h"
#include "google/protobuf/map.h"

namespace fl::server {

// client_name, sdk_version and the capabilities.
absl::Status CheckJoinInput(const fl::v1::JoinRequest& req, const ClientInputLimits& limits);
// A name or id field: at most max_name_bytes. `field` names it ("task_id").
absl::Status CheckName(const std::string& value, absl::string_view field,
                       const ClientInputLimits& limits);
// A decline reason or error text, cut to max_text_bytes (at a UTF-8 boundary, marked "...
// (truncated)"): a site's own long error is still recorded, not refused.
std::string CutText(absl::string_view text, const ClientInputLimits& limits);
// A model spec a client sends (at join, with an update): at most kMaxTensors tensors, names of at
// most kMaxTensorNameBytes and kMaxTensorDims dimensions, so that a refusal that names them stays
// small.
inline constexpr int kMaxTensors = 1 << 20;
inline constexpr size_t kMaxTensorNameBytes = 1024;
inline constexpr int kMaxTensorDims = 32;
absl::Status CheckSpecInput(const fl::v1::ModelSpec& spec, absl::string_view whose);
// An update's declared SHA-256: 64 hex digits.
absl::Status CheckSha256Input(const std::string& hex);
// Metrics: at most max_metrics entries, each key at most max_metric_key_bytes. `whose` says
// whose metrics ("the update's").
absl::Status CheckMetrics(const google::protobuf::Map<std::string, double>& metrics,
                          absl::string_view whose, const ClientInputLimits& limits);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_INPUT_LIMITS_H_
