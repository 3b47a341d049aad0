// Our side of the side-by-side with Flower (issue 6, benchmark 4; bench/flower_compare.sh runs
// both sides and prints the comparison). Workload: the real server (its own process, mutual TLS
// on loopback, SQLite store and checkpoints in --work-dir, FedAvg) and N SDK clients (one process
// each) with a trivial trainer (global model plus a small perturbation, PerturbTrainer), a model
// of one float32 tensor of P parameters, R rounds of which round 1 is a warm-up; min_clients =
// min_fit_clients = N, no evaluation. Issue 6 runs (a) N = 10, P = 100k and (b) N = 4, P = 100M.
//   flower_compare_bench [--clients 10] [--params 100000] [--rounds 21] [--workload a]
//                        [--work-dir /tmp/flower_compare_bench] [--plaintext]
// --plaintext is a diagnostic, never part of the comparison: no TLS and no per-call certificate
// checks, to show what they cost.
//
// Every polling and liveness setting is the default a user gets (ServerOptions: max_poll_wait
// 20 s, tick_interval 50 ms; ClientOptions: poll_wait 15 s, heartbeat_interval 10 s; the engine's
// client_timeout 90 s): a long poll returns as soon as the engine's state changes, so they do not
// pace a round.
//
// Measured, in the server process:
//   round period: from one committed round's end (the on_round_end hook, after the checkpoint and
//                 the round's row committed) to the next's: everything the server does per round.
//   round duration: the engine's own duration of each round (start to close, as in SQLite).
//   peak RSS: VmHWM of the server process (its whole life: start, all rounds).
// Processes as in server_memory_bench.cc: the top-level process forks the server process, which
// forks its clients before it creates any gRPC object or thread, then serves and hands each
// client the port through a pipe. Prints a short table and one line starting with "RESULT ".
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_federation.h"
#include "fl/client/client.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"

namespace {

using fl::bench::Check;
using fl::bench::Child;
using fl::bench::Die;
using fl::bench::ForkWithPipe;
using fl::bench::Median;
using fl::bench::ProcStatusMiB;

fl::ModelSpec SpecOf(int64_t params) { return fl::ModelSpec({{"w", {params}}}); }

// A client process with every default of ClientOptions but its identity: waits for the port on
// `port_fd`, runs to DONE, exits 0 on OK.
[[noreturn]] void ClientProcess(int port_fd, const fl::ProvisionedFiles& pki, int index,
                                int64_t params, bool plaintext) {
  int port = 0;
  if (read(port_fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)) || port <= 0) {
    _exit(3);  // the server process failed before it could start the server
  }
  close(port_fd);
  // One example per update, as on Flower's side.
  fl::bench::PerturbTrainer trainer(SpecOf(params), static_cast<uint64_t>(index) + 1, 1);
  fl::client::ClientOptions co = fl::bench::TlsClientOptions(
      pki, static_cast<size_t>(index), absl::StrCat("127.0.0.1:", port));
  if (plaintext) {
    co = fl::client::ClientOptions{};
    co.server_address = absl::StrCat("127.0.0.1:", port);
    co.insecure_plaintext = true;
    co.name = absl::StrCat("site-", index);
  }
  fl::bench::RunClientAndExit(co, &trainer, index);
}

constexpr int kMaxRounds = 200;

// What the server process sends back through its pipe (plain data: written and read whole).
struct Figures {
  int committed_rounds = 0;
  int failed_clients = 0;
  double end_s[kMaxRounds] = {};       // each committed round's end, seconds after the port
  double duration_s[kMaxRounds] = {};  // the engine's duration of each committed round
  double wall_s = 0;                   // port handed out to WaitUntilFinished returning
  double peak_mib = 0;                 // VmHWM
  double base_mib = 0;                 // VmRSS just after Server::Start
  char reason[256] = {};               // why a round failed, if one did
};

[[noreturn]] void ServerProcess(int result_fd, const fl::ProvisionedFiles& pki,
                                const std::string& dir, int clients, int64_t params, int rounds,
                                bool plaintext) {
  fl::bench::Clients sites = fl::bench::ForkClients(
      clients, result_fd, [&](int fd, int i) { ClientProcess(fd, pki, i, params, plaintext); });

  std::filesystem::remove_all(dir);
  // Defaults everywhere but what the workload fixes: polling, ticks, timeouts and FedAvg are
  // what a user gets.
  fl::server::ServerOptions so = fl::bench::TlsServerOptions(pki, dir);
  so.engine.run_name = "flower-compare";
  so.engine.num_rounds = rounds;
  so.engine.min_clients = clients;
  so.engine.min_fit_clients = clients;
  so.engine.max_round_retries = 0;  // a failed round is reported, not retried
  if (plaintext) {
    so.insecure_plaintext = true;
    so.ca_cert_path.clear();
    so.cert_path.clear();
    so.key_path.clear();
    so.enroll_cert_paths.clear();
  }

  Figures f;
  std::mutex mu;
  absl::Time t0;
  fl::server::EngineHooks hooks;
  hooks.on_round_end = [&](const fl::server::RoundSummary& s) {
    const absl::Time now = absl::Now();
    std::lock_guard<std::mutex> lock(mu);
    if (s.committed && f.committed_rounds < kMaxRounds) {
      f.end_s[f.committed_rounds] = absl::ToDoubleSeconds(now - t0);
      f.duration_s[f.committed_rounds] = absl::ToDoubleSeconds(s.duration);
      ++f.committed_rounds;
    } else if (!s.committed && f.reason[0] == '\0') {
      std::snprintf(f.reason, sizeof(f.reason), "%s", s.reason.c_str());
    }
  };
  std::unique_ptr<fl::server::Server> server =
      Check(fl::server::Server::Start(so, fl::Model(SpecOf(params)), hooks), "server start");
  f.base_mib = ProcStatusMiB("VmRSS");
  const int port = server->port();
  {
    std::lock_guard<std::mutex> lock(mu);
    t0 = absl::Now();
  }
  fl::bench::HandOutPort(sites.port_fds, port);
  fl::bench::FinishServerProcess(*server, t0, sites.pids, "fl", mu, f, result_fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Round period and server peak memory of N SDK clients and a P-parameter model");
  int clients = 10;
  int64_t params = 100000;
  int rounds = 21;
  std::string workload;
  std::string work_dir = "/tmp/flower_compare_bench";
  bool plaintext = false;
  app.add_flag("--plaintext", plaintext,
               "Diagnostic only: no TLS and no per-call certificate checks, to show what they cost");
  app.add_option("--clients", clients)->check(CLI::Range(1, 64));
  app.add_option("--params", params, "float32 parameters (one tensor)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  app.add_option("--rounds", rounds, "Rounds, the first a warm-up")->check(CLI::Range(2, kMaxRounds));
  app.add_option("--workload", workload, "Label echoed in the RESULT line");
  app.add_option("--work-dir", work_dir);
  CLI11_PARSE(app, argc, argv);
  if (!std::getenv("FL_LOG_LEVEL")) fl::SetLogLevel(fl::LogLevel::kError);

  std::filesystem::remove_all(work_dir);
  const fl::ProvisionedFiles pki = fl::bench::ProvisionSites(work_dir, clients);

  const absl::Time launch = absl::Now();
  const Child c = ForkWithPipe(/*parent_writes=*/false, [&](int fd) {
    ServerProcess(fd, pki, work_dir + "/server", clients, params, rounds, plaintext);
  });
  auto f = std::make_unique<Figures>();
  const ssize_t got = read(c.parent_fd, f.get(), sizeof(Figures));
  close(c.parent_fd);
  int status = 0;
  waitpid(c.pid, &status, 0);
  const double total_s = absl::ToDoubleSeconds(absl::Now() - launch);
  std::filesystem::remove_all(work_dir);  // (b) leaves a checkpoint of P x 4 bytes per round
  if (got != static_cast<ssize_t>(sizeof(Figures))) {
    Die(absl::StrCat("server process failed (wait status ", status, ")"));
  }

  std::vector<double> periods;
  std::vector<double> durations;
  for (int i = 1; i < f->committed_rounds; ++i) {
    periods.push_back(f->end_s[i] - f->end_s[i - 1]);
    durations.push_back(f->duration_s[i]);
  }
  const double med = Median(periods);
  const double lo = periods.empty() ? 0 : *std::min_element(periods.begin(), periods.end());
  const double hi = periods.empty() ? 0 : *std::max_element(periods.begin(), periods.end());
  std::printf("fl (ours): %d clients, %lld float32 parameters, %d rounds (1 warm-up), %s, "
              "SQLite + checkpoint per round, default polling\n",
              clients, static_cast<long long>(params), rounds,
              plaintext ? "PLAINTEXT (diagnostic)" : "mutual TLS");
  std::printf("| round period median s | min s | max s | round duration median s "
              "| server peak RSS MiB | rounds | failed clients | wall s |\n");
  std::printf("| %.4f | %.4f | %.4f | %.4f | %.0f | %d | %d | %.1f |\n", med, lo, hi,
              Median(durations), f->peak_mib, f->committed_rounds, f->failed_clients, total_s);
  if (f->reason[0] != '\0') std::printf("a round failed: %s\n", f->reason);
  std::printf("RESULT side=%s workload=%s clients=%d params=%lld rounds=%d failures=%d "
              "period_median_s=%.6f duration_median_s=%.6f peak_rss_mib=%.1f base_rss_mib=%.1f "
              "setup_s=%.2f wall_s=%.2f\n",
              plaintext ? "ours-plaintext" : "ours", workload.c_str(), clients,
              static_cast<long long>(params), f->committed_rounds,
              f->failed_clients, med, Median(durations), f->peak_mib, f->base_mib,
              f->committed_rounds > 0 ? f->end_s[0] : 0.0, total_s);
  return f->committed_rounds == rounds && f->failed_clients == 0 ? 0 : 1;
}
