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
// A decline reason or error text: at most max_text_bytes.
absl::Status CheckText(const std::string& value, absl::string_view field,
                       const ClientInputLimits& limits);
// Metrics: at most max_metrics entries, each key at most max_metric_key_bytes. `whose` says
// whose metrics ("the update's").
absl::Status CheckMetrics(const google::protobuf::Map<std::string, double>& metrics,
                          absl::string_view whose, const ClientInputLimits& limits);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_INPUT_LIMITS_H_
