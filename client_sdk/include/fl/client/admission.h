// Admission: asks a federation's server whether it admits this site, without joining. What
// `fl client --preflight` runs as its last network check: the server authenticates the site's
// certificate and checks its enrollment exactly as for a Join, and answers as Join would, but
// does not register the site (a Join with dry_run set), so the site is neither online nor
// sampled in a round and nothing of the run changes.
#ifndef FL_CLIENT_ADMISSION_H_
#define FL_CLIENT_ADMISSION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/client/client.h"

namespace fl::client {

// What the server answered.
struct Admission {
  std::string client_id;  // the identity the server knows this site by (its fingerprint)
  int64_t run_id = 0;     // the run a Join would put it in
};

// Dials options.server_address as Client::Create would (the same TLS files and checks) and sends
// one dry-run Join with `timeout` as its deadline (one connection attempt, no retries). Returns
// the server's answer; UNAUTHENTICATED or PERMISSION_DENIED with the server's reason when it
// refuses the site (a certificate of another CA, not enrolled, revoked); FAILED_PRECONDITION
// naming the difference when `trainer` (if given) trains another model than the run's, or
// options.feature_columns are not the run's columns (a dry run never fixes the run's columns); UNAVAILABLE or
// DEADLINE_EXCEEDED (with gRPC's message) when it cannot be reached; Client::Create's errors for
// the options. A server older than the dry_run field would register the site as a Join does.
// Thread-safe.
absl::StatusOr<Admission> CheckAdmission(ClientOptions options, const Trainer* trainer = nullptr,
                                         absl::Duration timeout = absl::Seconds(10));

}  // namespace fl::client

#endif  // FL_CLIENT_ADMISSION_H_
