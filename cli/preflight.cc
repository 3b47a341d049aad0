#include "cli/preflight.h"

#include <cinttypes>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/exit_codes.h"
#include "cli/preflight_tls.h"
#include "cli/site_trainer.h"
#include "fl/client/admission.h"

namespace fl::cli {
namespace {

using Result = PreflightCheck::Result;

constexpr char kConfiguration[] = "configuration";
constexpr char kCertAndKey[] = "certificate and key";
constexpr char kChain[] = "certificate chain";
constexpr char kValidity[] = "certificate validity";
constexpr char kReachable[] = "server reachable";
constexpr char kHandshake[] = "TLS handshake";
constexpr char kEnrollment[] = "enrollment";
constexpr char kData[] = "data and model";

constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
constexpr absl::Duration kCallTimeout = absl::Seconds(10);
constexpr absl::Duration kRenewWithin = absl::Hours(24 * 30);

PreflightCheck Check(std::string name, Result result, std::string detail, std::string fix = "") {
  return {std::move(name), result, std::move(detail), std::move(fix)};
}

std::string Date(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M UTC", t, absl::UTCTimeZone());
}

// The certificate checks: key, chain, validity. True in `key_ok` when the certificate and key
// can be presented in a handshake.
void CheckCertificates(const fl::client::ClientOptions& o,
                       const std::function<void(PreflightCheck)>& add, bool& key_ok) {
  absl::StatusOr<preflight::CertInfo> cert = preflight::ReadCertificate(o.cert_path);
  if (!cert.ok()) {
    add(Check(kCertAndKey, Result::kFail, std::string(cert.status().message()),
              "give this site's certificate (server.cert, --cert): the clients/<site>.pem that "
              "`fl certs` made"));
    add(Check(kChain, Result::kSkip, "needs a readable certificate"));
    add(Check(kValidity, Result::kSkip, "needs a readable certificate"));
    return;
  }
  if (absl::Status s = preflight::CheckKeyMatches(o.cert_path, o.key_path); !s.ok()) {
    add(Check(kCertAndKey, Result::kFail, std::string(s.message()),
              "give the key made with this certificate (server.key, --key): the "
              "clients/<site>.key beside its .pem"));
  } else {
    key_ok = true;
    add(Check(kCertAndKey, Result::kPass,
              absl::StrCat(o.cert_path, " (CN=", cert->subject_cn, ") and its key ", o.key_path)));
  }
  if (absl::Status s = preflight::CheckChain(o.cert_path, o.ca_cert_path); !s.ok()) {
    add(Check(kChain, Result::kFail,
              absl::StrCat(o.cert_path, " (issued by CN=", cert->issuer_cn,
                           ") does not chain to the CA in ", o.ca_cert_path, ": ", s.message()),
              "give the federation's CA certificate (server.ca, --ca) and a site certificate "
              "that this CA issued"));
  } else {
    add(Check(
        kChain, Result::kPass,
        absl::StrCat("issued by CN=", cert->issuer_cn, ", verified against ", o.ca_cert_path)));
  }
  const absl::Time now = absl::Now();
  const int64_t days_left = absl::ToInt64Hours(cert->not_after - now) / 24;
  if (now < cert->not_before) {
    add(Check(kValidity, Result::kFail, absl::StrCat("not valid before ", Date(cert->not_before)),
              "check this machine's clock, or wait until then"));
  } else if (now > cert->not_after) {
    add(Check(kValidity, Result::kFail, absl::StrCat("expired on ", Date(cert->not_after)),
              "ask the federation's operator for a new certificate for this site"));
  } else if (cert->not_after - now < kRenewWithin) {
    add(Check(kValidity, Result::kWarn,
              absl::StrCat("valid until ", Date(cert->not_after), " (", days_left, " days left)"),
              "ask the federation's operator for a new certificate before then"));
  } else {
    add(Check(kValidity, Result::kPass,
              absl::StrCat("valid until ", Date(cert->not_after), " (", days_left, " days left)")));
  }
}

std::string HandshakeFix(const absl::Status& s) {
  if (!absl::IsUnauthenticated(s)) {
    return "check that server.address is the TLS port of an fl server (a server run with "
           "--insecure-plaintext needs server.insecure_plaintext)";
  }
  if (absl::StrContains(s.message(), "is valid for")) {
    return "connect by a name the server's certificate is valid for (server.address, "
           "--server), or ask the operator for a server certificate with this name "
           "(fl certs --server-name)";
  }
  return "give the federation's CA certificate (server.ca, --ca); if it is right, "
         "server.address leads to another federation's server";
}

std::string EnrollmentFix(const absl::Status& s, const fl::client::ClientOptions& o) {
  if (absl::IsFailedPrecondition(s)) {
    return "train the model the server's run was started with, on the run's columns "
           "(data.feature_columns, data.drop_columns); the message names what differs";
  }
  if (absl::IsPermissionDenied(s)) {
    return absl::StrCat(
        "ask the federation's operator to enroll this site: fl admin --data-dir "
        "<the server's> enroll ",
        o.cert_path, " --ca <the federation's ca.pem>");
  }
  if (absl::IsUnauthenticated(s)) {
    return "give a certificate that this federation's CA issued, within its dates";
  }
  return "see the server's log for why it did not answer";
}

}  // namespace

std::vector<PreflightCheck> RunPreflightChecks(
    const ClientConfig& config, const std::function<void(const PreflightCheck&)>& on_check) {
  std::vector<PreflightCheck> checks;
  auto add = [&](PreflightCheck c) {
    if (on_check) on_check(c);
    checks.push_back(std::move(c));
  };
  const fl::client::ClientOptions& o = config.client;
  const bool tls = !o.insecure_plaintext;
  if (absl::Status s = ValidateClientConfig(config); !s.ok()) {
    add(Check(kConfiguration, Result::kFail, std::string(s.message()),
              "set the keys (or flags) it names"));
    for (const char* name :
         {kCertAndKey, kChain, kValidity, kReachable, kHandshake, kEnrollment, kData}) {
      add(Check(name, Result::kSkip, "needs a valid configuration"));
    }
    return checks;
  }
  add(Check(kConfiguration, Result::kPass,
            absl::StrCat("server ", o.server_address, tls ? " with mutual TLS" : " in plaintext",
                         ", model ", config.model.kind, ", ", config.data.format, " data")));

  bool key_ok = false;
  if (tls) {
    CheckCertificates(o, add, key_ok);
  } else {
    for (const char* name : {kCertAndKey, kChain, kValidity}) {
      add(Check(name, Result::kSkip, "plaintext (server.insecure_plaintext)"));
    }
  }

  bool reachable = false;
  absl::StatusOr<std::pair<std::string, std::string>> host_port =
      preflight::SplitHostPort(o.server_address);
  if (!host_port.ok()) {
    add(Check(kReachable, Result::kFail, std::string(host_port.status().message()),
              "set server.address (--server) to the server's host:port"));
  } else if (absl::StatusOr<std::string> peer =
                 preflight::ProbeTcp(host_port->first, host_port->second, kConnectTimeout);
             !peer.ok()) {
    add(Check(kReachable, Result::kFail, std::string(peer.status().message()),
              absl::IsNotFound(peer.status())
                  ? "fix server.address (--server), or this machine's DNS"
                  : absl::StrCat("start the server, or fix server.address (--server); a "
                                 "firewall must let this machine connect out to port ",
                                 host_port->second)));
  } else {
    reachable = true;
    add(Check(kReachable, Result::kPass,
              absl::StrCat(o.server_address, " (", *peer, ") accepts a TCP connection")));
  }

  bool handshake = false;
  if (!tls) {
    add(Check(kHandshake, Result::kSkip, "plaintext (server.insecure_plaintext)"));
  } else if (!reachable) {
    add(Check(kHandshake, Result::kSkip, "needs the server reachable"));
  } else if (!key_ok) {
    add(Check(kHandshake, Result::kSkip, "needs the certificate and its key"));
  } else {
    preflight::TlsProbe probe;
    probe.host = host_port->first;
    probe.port = host_port->second;
    probe.expected_name =
        o.server_name_override.empty() ? host_port->first : o.server_name_override;
    probe.ca_path = o.ca_cert_path;
    probe.cert_path = o.cert_path;
    probe.key_path = o.key_path;
    probe.timeout = kCallTimeout;
    absl::StatusOr<preflight::TlsResult> tls_result = preflight::ProbeTls(probe);
    if (!tls_result.ok()) {
      add(Check(kHandshake, Result::kFail, std::string(tls_result.status().message()),
                HandshakeFix(tls_result.status())));
    } else {
      handshake = true;
      add(Check(kHandshake, Result::kPass,
                absl::StrCat(tls_result->version, "; the server's certificate CN=",
                             tls_result->server.subject_cn, " is valid for '", probe.expected_name,
                             "' and issued by CN=", tls_result->server.issuer_cn)));
    }
  }

  // The data and the model are checked before the enrollment, so that the dry-run Join also
  // asks whether the server's run takes this site's model and columns; the line comes last.
  absl::StatusOr<SiteTrainer> site = BuildSiteTrainer(config);
  fl::client::ClientOptions admission_options = o;
  if (site.ok()) admission_options.feature_columns = site->feature_columns;
  if (tls ? !handshake : !reachable) {
    add(Check(kEnrollment, Result::kSkip,
              tls ? "needs the TLS handshake" : "needs the server reachable"));
  } else if (absl::StatusOr<fl::client::Admission> admitted = fl::client::CheckAdmission(
                 admission_options, site.ok() ? site->trainer.get() : nullptr, kCallTimeout);
             !admitted.ok()) {
    add(Check(kEnrollment, Result::kFail, admitted.status().ToString(),
              EnrollmentFix(admitted.status(), o)));
  } else {
    add(Check(kEnrollment, Result::kPass,
              absl::StrCat("the server admits this site as ", admitted->client_id.substr(0, 16),
                           " (run ", admitted->run_id, "); nothing was registered")));
  }

  if (!site.ok()) {
    add(Check(kData, Result::kFail, std::string(site.status().message()),
              "fix the data, or [model] (--model, --features, --classes), so that they agree"));
  } else {
    add(Check(kData, Result::kPass,
              absl::StrCat(site->train_examples, " training and ", site->test_examples,
                           " test examples with ", site->arch.num_features, " features and ",
                           site->arch.num_classes, " classes fit model ", config.model.kind)));
  }
  return checks;
}

std::string FormatPreflightCheck(const PreflightCheck& check) {
  const char* tag = "PASS";
  switch (check.result) {
    case Result::kPass:
      break;
    case Result::kWarn:
      tag = "WARN";
      break;
    case Result::kFail:
      tag = "FAIL";
      break;
    case Result::kSkip:
      tag = "SKIP";
      break;
  }
  std::string line = absl::StrFormat("%s  %-21s %s", tag, check.name, check.detail);
  if (!check.fix.empty()) absl::StrAppend(&line, ". Fix: ", check.fix);
  return line;
}

int RunPreflight(const ClientConfig& config, std::FILE* out) {
  std::string site = config.client.name;
  if (site.empty() && !config.client.insecure_plaintext) {
    absl::StatusOr<preflight::CertInfo> cert = preflight::ReadCertificate(config.client.cert_path);
    site = cert.ok() ? cert->subject_cn : "?";
  }
  std::fprintf(out, "fl client preflight: site %s, server %s\n",
               site.empty() ? "site" : site.c_str(), config.client.server_address.c_str());
  int counts[4] = {};
  RunPreflightChecks(config, [&](const PreflightCheck& c) {
    ++counts[static_cast<int>(c.result)];
    std::fprintf(out, "%s\n", FormatPreflightCheck(c).c_str());
    std::fflush(out);
  });
  const int failed = counts[static_cast<int>(Result::kFail)];
  std::fprintf(out, "preflight: %d passed, %d warned, %d failed, %d skipped\n",
               counts[static_cast<int>(Result::kPass)], counts[static_cast<int>(Result::kWarn)],
               failed, counts[static_cast<int>(Result::kSkip)]);
  return failed == 0 ? kExitOk : kExitPreflightFailed;
}

}  // namespace fl::cli
