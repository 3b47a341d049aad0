// Helpers of the tests that run `fl client` as a site does (site_daemon_test.cc,
// site_preflight_test.cc): a tiny CSV site that trains in microseconds against a 2-feature
// softmax server, the real `fl server` started on a port, and log searches.
#ifndef FL_TESTS_INTEGRATION_SITE_TEST_UTIL_H_
#define FL_TESTS_INTEGRATION_SITE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "fl/common/file_util.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {

// Four rows of two features and a 0/1 label, for model softmax with 2 features and 2 classes.
inline std::string WriteSiteCsv(const std::string& dir) {
  const std::string path = dir + "/site.csv";
  EXPECT_TRUE(WriteFileAtomic(path, "a,b,label\n1,2,0\n2,3,1\n3,1,0\n0,1,1\n").ok());
  return path;
}

// The flags of a 2-feature softmax run of `rounds` rounds that one site is enough for, over in
// a second, then served for `grace_s` seconds.
inline std::vector<std::string> TinyRunFlags(int rounds, int grace_s) {
  return {"--rounds",          absl::StrCat(rounds),
          "--min-clients",     "1",
          "--min-fit-clients", "1",
          "--round-timeout",   "20",
          "--grace",           absl::StrCat(grace_s),
          "--model",           "softmax",
          "--features",        "2",
          "--classes",         "2",
          "--batch-size",      "2"};
}

// A site's TOML file under `dir` (named `name`.toml): the CSV site, mutual TLS with `cert` and
// `key` (from `pki`'s CA) to 127.0.0.1:`port`, short polls and waits; `extra` is appended to
// the [client] table.
inline std::string WriteSiteToml(const std::string& dir, const std::string& name, int port,
                                 const std::string& ca, const std::string& cert,
                                 const std::string& key, const std::string& extra = "") {
  const std::string path = absl::StrCat(dir, "/", name, ".toml");
  const std::string toml = absl::StrCat(
      "[server]\naddress = \"127.0.0.1:", port, "\"\nca = \"", ca, "\"\ncert = \"", cert,
      "\"\nkey = \"", key, "\"\n\n[data]\npath = \"", WriteSiteCsv(dir),
      "\"\n\n[model]\nkind = \"softmax\"\nclasses = 2\n\n[training]\nbackend = \"cpu\"\n",
      "cpu_threads = 1\n\n[client]\npoll_wait_s = 1\nheartbeat_s = 1\nreconnect_timeout_s = 30\n",
      "next_run_poll_s = 0.2\n", extra);
  EXPECT_TRUE(WriteFileAtomic(path, toml).ok());
  return path;
}

// Waits up to `timeout` for `needle` in the file at `path`.
inline bool WaitForText(const std::string& path, const std::string& needle,
                        absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (ReadFile(path).value_or("").find(needle) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// The real `fl server` with `argv`, its log at `log`, started once it logs server_listening.
inline std::unique_ptr<ChildProcess> StartServer(const std::vector<std::string>& argv,
                                                 const std::string& log) {
  auto server = std::make_unique<ChildProcess>(argv, log);
  EXPECT_TRUE(WaitForText(log, "server_listening")) << ReadFile(log).value_or("");
  return server;
}

struct FlResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// Runs `fl` with `args` to its end, its output in `dir`/`log_name`.
inline FlResult RunFl(const std::vector<std::string>& args, const std::string& dir,
                      const std::string& log_name = "fl.log") {
  const std::string log = absl::StrCat(dir, "/", log_name);
  (void)WriteFileAtomic(log, "");
  std::vector<std::string> argv = {FL_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child(argv, log);
  FlResult r;
  r.exit_code = child.Wait();
  r.out = ReadFile(log).value_or("");
  return r;
}

// The first line of `text` that starts with `prefix`, or "" when none does.
inline std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line);
  }
  return "";
}

// How often `needle` occurs in `text`.
inline int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace fl::testing

#endif  // FL_TESTS_INTEGRATION_SITE_TEST_UTIL_H_
