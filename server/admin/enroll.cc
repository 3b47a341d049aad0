// Enrolling and revoking clients for `fl admin`; the reports are in admin.cc.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/crypto.h"
#include "server/admin/admin.h"

namespace fl::server::admin {
namespace {

constexpr size_t kFingerprintDigits = 64;  // SHA-256 in hex

std::string Describe(const ClientRecord& c) {
  return absl::StrCat("'", c.name, "' (fingerprint ", c.client_id, ")");
}

// Writes the audit record of an operator's action on a client.
absl::Status AuditAction(Store& store, const std::string& event, const std::string& client_id,
                         const std::string& detail, int64_t now_ms) {
  AuditRecord record;
  record.at_ms = now_ms;
  record.client_id = client_id;
  record.event = event;
  record.detail = detail;
  return store.Audit(record);
}

}  // namespace

absl::StatusOr<Enrollment> EnrollCertificate(Store& store, absl::string_view cert_pem,
                                             absl::string_view ca_pem, const std::string& name,
                                             const std::string& operator_name, int64_t now_ms) {
  // fl/common/crypto.h takes std::string_view; Debian's Abseil has its own string_view.
  const std::string cert(cert_pem);
  const std::string ca(ca_pem);
  absl::StatusOr<std::string> fingerprint = CertificateFingerprint(cert);
  if (!fingerprint.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a client certificate: ", std::string(fingerprint.status().message())));
  }
  if (absl::StatusOr<std::string> ca_fp = CertificateFingerprint(ca); !ca_fp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a CA certificate: ", std::string(ca_fp.status().message())));
  }
  if (absl::Status s = VerifyClientCertificate(cert, ca); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("refusing to enroll certificate ", *fingerprint,
                                               ": ", std::string(s.message())));
  }
  if (absl::StatusOr<ClientCertificateVerifier> verifier = ClientCertificateVerifier::Create(ca);
      verifier.ok()) {
    absl::StatusOr<CertificateIdentity> identity = verifier->Verify(cert);
    if (identity.ok() && identity->admin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refusing to enroll certificate ", *fingerprint, " (CN=", identity->common_name,
          "): it is an admin certificate, for the control API (fl run); a site needs its own "
          "(fl certs add-site NAME)"));
    }
  }
  Enrollment out{.client_id = *fingerprint, .name = name};
  if (out.name.empty()) {
    absl::StatusOr<std::string> cn = CertificateCommonName(cert);
    out.name = cn.ok() ? *cn : fingerprint->substr(0, kTableIdDigits);
  }

  absl::StatusOr<std::vector<ClientRecord>> clients = store.Clients();
  if (!clients.ok()) return clients.status();
  std::string before;  // what changed for a client that was already known
  for (const ClientRecord& c : *clients) {
    if (c.client_id != out.client_id) continue;
    if (c.revoked_at_ms == 0 && c.name == out.name) {  // nothing to do but what was not known
      if (c.cert_not_after_ms == 0) {
        if (absl::StatusOr<int64_t> expiry = CertificateNotAfterMs(cert); expiry.ok()) {
          (void)store.SetClientCertificateExpiry(out.client_id, *expiry);
        }
      }
      return out;
    }
    before = c.revoked_at_ms != 0 ? "; it had been revoked"
                                  : absl::StrCat("; it was enrolled as '", c.name, "'");
  }
  if (absl::Status s = store.EnrollClient(out.client_id, out.name, now_ms); !s.ok()) return s;
  if (absl::StatusOr<int64_t> expiry = CertificateNotAfterMs(cert); expiry.ok()) {
    if (absl::Status s = store.SetClientCertificateExpiry(out.client_id, *expiry); !s.ok()) {
      return s;
    }
  }
  out.changed = true;
  const std::string detail =
      absl::StrCat("client '", out.name, "' (fingerprint ", out.client_id,
                   ") enrolled by operator '", operator_name, "' with fl admin", before);
  if (absl::Status s = AuditAction(store, "client_enrolled", out.client_id, detail, now_ms);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("client ", out.client_id,
                                     " is enrolled, but writing the audit record failed: ",
                                     std::string(s.message())));
  }
  return out;
}

absl::StatusOr<ClientRecord> FindClient(Store& store, absl::string_view name_or_fingerprint) {
  absl::StatusOr<std::vector<ClientRecord>> clients = store.Clients();
  if (!clients.ok()) return clients.status();
  // A fingerprint or a prefix of one: hex digits, case and ':' separators ignored.
  std::string prefix;
  bool hex = !name_or_fingerprint.empty();
  for (char c : name_or_fingerprint) {
    if (c == ':') continue;
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) hex = false;
    prefix += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  const bool prefix_length_ok = prefix.size() >= static_cast<size_t>(kMinPrefixDigits) &&
                                prefix.size() <= static_cast<size_t>(kFingerprintDigits);
  std::vector<const ClientRecord*> by_fingerprint, by_name;
  for (const ClientRecord& c : *clients) {
    if (hex && prefix_length_ok && absl::StartsWith(c.client_id, prefix)) {
      by_fingerprint.push_back(&c);
    }
    if (c.name == name_or_fingerprint) by_name.push_back(&c);
  }
  auto ambiguous = [](const std::vector<const ClientRecord*>& matches, const std::string& what,
                      const std::string& fix) {
    std::vector<std::string> names;
    for (const ClientRecord* c : matches) names.push_back(Describe(*c));
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ambiguous: it matches ", matches.size(),
                     " clients: ", absl::StrJoin(names, ", "), "; ", fix));
  };
  // A fingerprint prefix wins over a name that happens to be hex.
  if (by_fingerprint.size() == 1) return *by_fingerprint[0];
  if (by_fingerprint.size() > 1) {
    return ambiguous(by_fingerprint, absl::StrCat("fingerprint prefix ", prefix),
                     "give more digits");
  }
  if (by_name.size() == 1) return *by_name[0];
  if (by_name.size() > 1) {
    return ambiguous(by_name, absl::StrCat("the name '", name_or_fingerprint, "'"),
                     "give the fingerprint (or 8 or more of its first digits) instead");
  }
  if (hex && !prefix_length_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("no client is named '", name_or_fingerprint, "', and as a fingerprint it has ",
                     prefix.size(), " hex digits: give between ", kMinPrefixDigits, " and ",
                     kFingerprintDigits, " digits of the client's fingerprint"));
  }
  return absl::NotFoundError(absl::StrCat(
      "no client is named '", name_or_fingerprint, "'",
      hex ? absl::StrCat(" and no enrolled client's fingerprint starts with ", prefix) : "", " (",
      clients->size(), " clients; see `fl admin clients`)"));
}

absl::StatusOr<Revocation> RevokeClient(Store& store, absl::string_view name_or_fingerprint,
                                        const std::string& operator_name, int64_t now_ms) {
  absl::StatusOr<ClientRecord> client = FindClient(store, name_or_fingerprint);
  if (!client.ok()) return client.status();
  Revocation out{.client = *client};
  if (client->revoked_at_ms != 0) {
    out.already_revoked = true;
    return out;
  }
  if (absl::Status s = store.RevokeClient(client->client_id, now_ms); !s.ok()) return s;
  const std::string detail = absl::StrCat("client ", Describe(*client), " revoked by operator '",
                                          operator_name, "' with fl admin");
  if (absl::Status s = AuditAction(store, "client_revoked", client->client_id, detail, now_ms);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("client ", client->client_id,
                                               " is revoked, but writing the audit record failed: ",
                                               std::string(s.message())));
  }
  return out;
}

}  // namespace fl::server::admin
