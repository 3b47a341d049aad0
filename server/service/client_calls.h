// How many calls each client has in progress, bounded per client: one enrolled site cannot hold
// more of the server than `limits.max_streams_per_client` calls at once (long polls, downloads,
// uploads and short calls alike), nor more than `limits.max_uploads_per_client` uploads. A call
// takes a Lease once the caller is identified and gives it back when it ends.
#ifndef FL_SERVER_SERVICE_CLIENT_CALLS_H_
#define FL_SERVER_SERVICE_CLIENT_CALLS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fl/server/client_limits.h"

namespace fl::server {

class ClientCalls {
 public:
  explicit ClientCalls(const ClientInputLimits& limits) : limits_(limits) {}

  // One call of one client, counted while it lives. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }
    void Release();

   private:
    friend class ClientCalls;
    Lease(ClientCalls* calls, std::string client_id, bool upload)
        : calls_(calls), client_id_(std::move(client_id)), upload_(upload) {}
    ClientCalls* calls_ = nullptr;
    std::string client_id_;
    bool upload_ = false;
  };

  // Counts a call of `client_id` (an upload when `upload`). RESOURCE_EXHAUSTED naming the limit
  // when the client already has max_streams_per_client calls, or max_uploads_per_client uploads,
  // in progress. Thread-safe.
  // `*audit` (when not null) says whether to audit this refusal: the first of a client's in
  // kAuditEvery, so that a client flooding the server cannot flood the audit log too.
  absl::StatusOr<Lease> Open(const std::string& client_id, bool upload, bool* audit = nullptr);
  static constexpr absl::Duration kAuditEvery = absl::Minutes(1);

  // Calls in progress, over all clients.
  int64_t open() const;

 private:
  struct Count {
    int32_t calls = 0;
    int32_t uploads = 0;
  };
  // True (and noted) when `client_id`'s last audited refusal is kAuditEvery old or more.
  bool AuditNowLocked(const std::string& client_id, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(const std::string& client_id, bool upload);

  const ClientInputLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Count> counts_ ABSL_GUARDED_BY(mu_);
  int64_t open_ ABSL_GUARDED_BY(mu_) = 0;
  // When each client's last refusal was audited; kept apart from counts_, whose entries go when a
  // client's calls end. Pruned of entries past kAuditEvery when it grows past kMaxAudited.
  static constexpr size_t kMaxAudited = 4096;
  absl::flat_hash_map<std::string, absl::Time> audited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_CLIENT_CALLS_H_
