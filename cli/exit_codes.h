// The exit codes of `fl client`, one per way it can end, so that systemd (deploy/fl-client.service:
// RestartPreventExitStatus) and scripts can tell a site to fix from a server to wait for.
//
// They avoid CLI11's own codes (100 to 127: a flag that does not parse exits with
// kExitConfig instead) and 128 + a signal number (what a shell reports for a process killed by
// one). README.md ("Training at a site") and `fl client --help` list them.
#ifndef FL_CLI_EXIT_CODES_H_
#define FL_CLI_EXIT_CODES_H_

namespace fl::cli {

// Stopped by SIGTERM or SIGINT (at any point, also mid-run); with --once, the run finished; with
// --preflight, every check passed.
inline constexpr int kExitOk = 0;
// Anything not below: an unexpected error (the message says which).
inline constexpr int kExitError = 1;
// The configuration or the data, before anything connects: a flag or TOML key that does not
// parse or fit, a TLS file that cannot be read, data that does not fit the model; with --once, a
// server whose certificate this site's CA does not trust or that is not valid for
// server.address (serving, the site says so at its next-run pace and keeps trying). Retrying
// cannot help: fix the configuration.
inline constexpr int kExitConfig = 2;
// The server refused this site (UNAUTHENTICATED or PERMISSION_DENIED: not enrolled, revoked, a
// certificate of another CA; FAILED_PRECONDITION at Join: a model or data columns that are not
// the run's), at Join or later. Stops a serving client too: retrying cannot help
// until the federation's operator enrolls the site.
inline constexpr int kExitRefused = 3;
// --once: the run ended, and the server says it failed.
inline constexpr int kExitRunFailed = 4;
// --once: the server stayed unreachable past reconnect_timeout. (Serving run after run, the
// client keeps retrying instead, logging each retry.)
inline constexpr int kExitUnreachable = 5;
// --preflight: at least one check failed (each FAIL line names the fix).
inline constexpr int kExitPreflightFailed = 6;

// The table above for `fl client --help`.
inline constexpr char kClientExitCodesHelp[] =
    "Exit codes:\n"
    "  0  stopped by SIGTERM/SIGINT; --once: the run finished; --preflight: all checks passed\n"
    "  1  an unexpected error\n"
    "  2  configuration or data error (flags, TOML, TLS files, a server certificate that\n"
    "     server.ca does not trust, data that does not fit the model)\n"
    "  3  the server refused this site (not enrolled, revoked, another CA, another model or\n"
    "     columns than the run's): not retried\n"
    "  4  --once: the run failed\n"
    "  5  --once: the server stayed unreachable past --reconnect-timeout\n"
    "  6  --preflight: a check failed\n";

}  // namespace fl::cli

#endif  // FL_CLI_EXIT_CODES_H_
