// The store's record of admin certificates revoked (table revoked_certificates).
#include <mutex>
#include <optional>
#include <string>

#include "server/store/sqlite_store.h"

namespace fl::server::internal {

using sqlite::Statement;

absl::Status SqliteStore::RevokeCertificate(const std::string& fingerprint, const std::string& name,
                                            int64_t now_ms) {
  if (absl::Status s = CheckWritable("revoke a certificate"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT OR IGNORE INTO revoked_certificates(fingerprint, name, revoked_at_ms) "
      "VALUES (?, ?, ?)",
      "revoke a certificate");
  if (!st.ok()) return st.status();
  return st->Bind(fingerprint, name, now_ms).Run();
}

absl::StatusOr<std::optional<int64_t>> SqliteStore::CertificateRevokedAt(
    const std::string& fingerprint) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("SELECT revoked_at_ms FROM revoked_certificates WHERE fingerprint = ?",
              "read revoked_certificates");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Bind(fingerprint).Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  return st->Int(0);
}

}  // namespace fl::server::internal
