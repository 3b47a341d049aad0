#include "server/service/client_calls.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fl::server {

ClientCalls::Lease& ClientCalls::Lease::operator=(Lease&& other) noexcept {
  if (this == &other) return *this;
  Release();
  calls_ = std::exchange(other.calls_, nullptr);
  client_id_ = std::move(other.client_id_);
  upload_ = other.upload_;
  return *this;
}

void ClientCalls::Lease::Release() {
  if (calls_ == nullptr) return;
  std::exchange(calls_, nullptr)->Close(client_id_, upload_);
}

absl::StatusOr<ClientCalls::Lease> ClientCalls::Open(const std::string& client_id, bool upload,
                                                     bool* audit) {
  absl::MutexLock lock(&mu_);
  Count& count = counts_[client_id];
  const bool over_calls = count.calls >= limits_.max_streams_per_client;
  const bool over_uploads = upload && count.uploads >= limits_.max_uploads_per_client;
  if (over_calls || over_uploads) {
    // count.calls >= 1 here (the limits are at least 1), so the entry is not left empty.
    const bool first = AuditNowLocked(client_id, absl::Now());
    if (audit != nullptr) *audit = first;
  }
  if (over_calls) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", count.calls, " calls in progress; the server takes at most ",
        limits_.max_streams_per_client,
        " at once from one client (limits.max_streams_per_client): let one end first"));
  }
  if (over_uploads) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", count.uploads, " uploads in progress; the server takes at most ",
        limits_.max_uploads_per_client,
        " at once from one client (limits.max_uploads_per_client): finish or cancel one first"));
  }
  ++count.calls;
  if (upload) ++count.uploads;
  ++open_;
  return Lease(this, client_id, upload);
}

bool ClientCalls::AuditNowLocked(const std::string& client_id, absl::Time now) {
  if (audited_.size() >= kMaxAudited) {
    absl::erase_if(audited_, [&](const auto& entry) { return now - entry.second >= kAuditEvery; });
  }
  auto [it, added] = audited_.try_emplace(client_id, now);
  if (added) return true;
  if (now - it->second < kAuditEvery) return false;
  it->second = now;
  return true;
}

int64_t ClientCalls::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

void ClientCalls::Close(const std::string& client_id, bool upload) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(client_id);
  if (it == counts_.end()) return;
  --it->second.calls;
  if (upload) --it->second.uploads;
  --open_;
  if (it->second.calls <= 0) counts_.erase(it);
}

}  // namespace fl::server
