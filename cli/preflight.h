// `fl client --preflight`: checks, with the configuration a site would run with, everything that
// can stop it from taking part, like NVFlare's preflight_check, and prints one line per check:
//
//   PASS  certificate and key    /etc/fl/site.pem (CN=hospital-a) and its key /etc/fl/site.key
//   FAIL  TLS handshake          the server's certificate (CN=fl-server) is valid for localhost,
//                                127.0.0.1, not for 'fl.example.org'. Fix: connect by one of ...
//   SKIP  enrollment             needs the TLS handshake
//
// The checks, in order: the configuration; the certificate and key (readable, the key is the
// certificate's); the certificate chain (to the CA file, by X509_verify_cert); its validity
// (dates, with the expiry: WARN under 30 days left); the server's address (resolves, a TCP
// connection opens); the TLS handshake (mutual TLS, the server's certificate verified against
// the CA and matched against the host name); the enrollment (a dry-run Join: the server admits
// this site, registering nothing); the data against the model (what `fl client` loads before it
// connects). A check that needs one that failed is SKIP, with the reason. In plaintext mode
// the certificate checks and the handshake are SKIP.
//
// Nothing a check does changes the server: the Join is a dry run (JoinRequest.dry_run).
#ifndef FL_CLI_PREFLIGHT_H_
#define FL_CLI_PREFLIGHT_H_

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cli/client_config.h"

namespace fl::cli {

struct PreflightCheck {
  enum class Result { kPass, kWarn, kFail, kSkip };
  std::string name;  // "certificate and key", ...
  Result result = Result::kPass;
  std::string detail;  // what was found; for kFail the cause; for kSkip why
  std::string fix;     // kFail and kWarn: what to do
};

// Runs every check in order, calling `on_check` as each completes (for printing), and returns
// them all. Takes up to about 30 s when the server does not answer (each network check has its
// own timeout). Thread-safe.
std::vector<PreflightCheck> RunPreflightChecks(
    const ClientConfig& config, const std::function<void(const PreflightCheck&)>& on_check);

// One checklist line: "PASS  <name padded>  <detail>", and for a FAIL or WARN ". Fix: <fix>".
std::string FormatPreflightCheck(const PreflightCheck& check);

// Prints a header, each check as it completes and a summary to `out`; returns kExitOk when no
// check failed (a WARN passes), else kExitPreflightFailed (cli/exit_codes.h).
int RunPreflight(const ClientConfig& config, std::FILE* out);

}  // namespace fl::cli

#endif  // FL_CLI_PREFLIGHT_H_
