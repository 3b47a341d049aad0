// What the server takes from a client's text and maps: each a server option ([limits] in
// `fl server`'s configuration) with a safe default. A request over one is refused with
// INVALID_ARGUMENT naming the field, its size and the option (e.g. "client_name is 1500000 bytes;
// the server takes at most 128 (limits.max_name_bytes)"), and the refusal is audited; the round
// goes on with the other sites. The per-client call quotas refuse with RESOURCE_EXHAUSTED instead
// (a retry later succeeds).
#ifndef FL_SERVER_CLIENT_LIMITS_H_
#define FL_SERVER_CLIENT_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace fl::server {

struct ClientInputLimits {
  // A join's client_name and sdk_version, each capability, and every task id a client sends.
  int64_t max_name_bytes = 128;
  // Capabilities a join may list.
  int32_t max_capabilities = 32;
  // Entries of one update's or one evaluation's metrics, and the bytes of each key.
  int32_t max_metrics = 1024;
  int64_t max_metric_key_bytes = 128;
  // A decline reason or an evaluation's error text is cut to this (not refused: a site's own long
  // error is still recorded).
  int64_t max_text_bytes = 4096;
  // Calls one client may have in progress at once (long polls, downloads, uploads and short calls
  // alike); of them, uploads. A well-behaved site has at most four (a poll, a heartbeat, a
  // download or an upload, and one left over from a retry): past these, RESOURCE_EXHAUSTED.
  int32_t max_streams_per_client = 8;
  int32_t max_uploads_per_client = 2;
  // An upload or download that moves no data for this long is cut (and one whose round closed,
  // at the next check), freeing what it holds; the cut is audited.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
  // Bytes of metadata (headers) one call may carry; gRPC refuses a call past it
  // (RESOURCE_EXHAUSTED) before the service sees it. gRPC's own default is 8 KiB.
  int32_t max_metadata_bytes = 8192;

  // INVALID_ARGUMENT naming a limit below 1.
  absl::Status Validate() const {
    if (max_name_bytes < 1 || max_capabilities < 1 || max_metrics < 1 || max_metric_key_bytes < 1 ||
        max_text_bytes < 1 || max_streams_per_client < 1 || max_uploads_per_client < 1 ||
        max_metadata_bytes < 1024) {
      return absl::InvalidArgumentError(
          "limits.max_name_bytes, max_capabilities, max_metrics, max_metric_key_bytes, "
          "max_text_bytes, max_streams_per_client and max_uploads_per_client must each be at "
          "least 1, and max_metadata_bytes at least 1024");
    }
    if (stream_idle_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("limits.stream_idle_timeout_s must be positive");
    }
    return absl::OkStatus();
  }
};

}  // namespace fl::server

#endif  // FL_SERVER_CLIENT_LIMITS_H_
