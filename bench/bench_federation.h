// Shared by the benchmarks that run the real server and SDK clients: a trainer that measures the
// framework, not training, the server options of a mutual-TLS run on loopback, and the small
// helpers of a benchmark's main (read /proc/self/status; failing loudly and medians are in
// bench_check.h).
#ifndef FL_BENCH_BENCH_FEDERATION_H_
#define FL_BENCH_BENCH_FEDERATION_H_

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_check.h"
#include "fl/client/client.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"

namespace fl::bench {

// A child process joined to this one by a pipe: the parent keeps `parent_fd` (the write end when
// `parent_writes`, else the read end); the child runs `body` with the other end and never
// returns from it. Fork before creating any gRPC object or thread.
struct Child {
  pid_t pid = -1;
  int parent_fd = -1;
};
template <typename Body>
Child ForkWithPipe(bool parent_writes, Body body) {
  int p[2];
  if (pipe(p) != 0) Die("pipe");
  const int parent_end = parent_writes ? p[1] : p[0];
  const int child_end = parent_writes ? p[0] : p[1];
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    close(parent_end);
    body(child_end);
    std::_Exit(1);  // `body` does not return
  }
  close(child_end);
  return Child{pid, parent_end};
}

// Seconds on CLOCK_MONOTONIC: one clock for every process of a benchmark.
inline double MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// User + system CPU seconds of this process, every thread.
inline double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

// /proc/loadavg's first three figures ("1.20 0.85 0.60").
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// Waits for the client processes `pids`; the number that did not exit 0, each named on stderr
// with `label`.
inline int ReapClients(const std::vector<pid_t>& pids, const std::string& label) {
  int failed = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
      std::fprintf(stderr, "%s: client %zu %s %d\n", label.c_str(), i,
                   WIFSIGNALED(status) ? "killed by signal" : "exited with",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
  }
  return failed;
}

// A model of one float32 tensor of `model_mib` MiB.
inline ModelSpec SpecOfMiB(int64_t model_mib) {
  return ModelSpec({{"w", {model_mib * (int64_t{1} << 18)}}});  // 2^18 floats per MiB
}

// A "Vm...:   1234 kB" field of /proc/self/status (VmHWM, VmRSS), in MiB; -1 when absent.
inline double ProcStatusMiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = absl::StrCat(field, ":");
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream is(line.substr(key.size()));
    double kb = 0;
    is >> kb;
    return kb / 1024.0;
  }
  return -1;
}

// N client processes, each waiting for the server's port on a pipe. Client i runs `client(fd, i)`
// with its end of the pipe, after closing the other clients' pipes and `close_in_child` (a pipe
// of this process's own; -1: none). Fork before creating any gRPC object or thread.
struct Clients {
  std::vector<int> port_fds;
  std::vector<pid_t> pids;
};
template <typename Body>
Clients ForkClients(int n, int close_in_child, Body client) {
  Clients out;
  for (int i = 0; i < n; ++i) {
    const Child c = ForkWithPipe(/*parent_writes=*/true, [&](int fd) {
      if (close_in_child >= 0) close(close_in_child);
      for (int other : out.port_fds) close(other);
      client(fd, i);
    });
    out.port_fds.push_back(c.parent_fd);
    out.pids.push_back(c.pid);
  }
  return out;
}

// Tells every client the server's port, and closes their pipes.
inline void HandOutPort(std::vector<int>& port_fds, int port) {
  for (int fd : port_fds) {
    if (write(fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) Die("write port");
    close(fd);
  }
  port_fds.clear();
}

// The end of a benchmark's server process: waits for the run (clients hear DONE in a 3 s
// grace), reaps the clients, records wall time from `t0`, failed clients and VmHWM in `f`
// (under `mu`, which the engine's hooks also take), and writes `f` to `result_fd` whole.
template <typename Figures>
[[noreturn]] void FinishServerProcess(server::Server& server, absl::Time t0,
                                      const std::vector<pid_t>& pids, const std::string& label,
                                      std::mutex& mu, Figures& f, int result_fd) {
  server.WaitUntilFinished(absl::Seconds(3));
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const int failed = ReapClients(pids, label);
  server.Shutdown();
  std::lock_guard<std::mutex> lock(mu);
  f.wall_s = wall_s;
  f.failed_clients = failed;
  f.peak_mib = ProcStatusMiB("VmHWM");
  if (write(result_fd, &f, sizeof(f)) != static_cast<ssize_t>(sizeof(f))) _exit(2);
  _exit(0);
}

// Returns the global model plus a small pseudo-random change (xorshift; +-0.01 at most), with a
// fixed example count.
class PerturbTrainer final : public client::Trainer {
 public:
  PerturbTrainer(ModelSpec spec, uint64_t seed, int64_t examples)
      : spec_(std::move(spec)), seed_(seed), examples_(examples) {}
  ModelSpec spec() const override { return spec_; }
  absl::StatusOr<client::FitResult> Fit(const Model& global, const client::FitConfig&) override {
    client::FitResult r{.model = global.Clone(), .num_examples = examples_, .metrics = {}};
    uint64_t x = seed_ * 0x9E3779B97F4A7C15ull + 1;
    for (float& v : r.model.data()) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v += static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) * 1e-5f;
    }
    return r;
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model&) override {
    return absl::UnimplementedError("no evaluation in this benchmark");
  }

 private:
  ModelSpec spec_;
  uint64_t seed_;
  int64_t examples_;
};

// A server on a free loopback port over mutual TLS with `pki`, every client enrolled, its data in
// `dir`, one round.
inline server::ServerOptions TlsServerOptions(const ProvisionedFiles& pki, const std::string& dir) {
  server::ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.data_dir = dir;
  so.ca_cert_path = pki.ca_cert;
  so.cert_path = pki.server_cert;
  so.key_path = pki.server_key;
  so.enroll_cert_paths = pki.client_certs;
  so.engine.num_rounds = 1;
  return so;
}

// Client `index`'s options for the server at `address` over mutual TLS with `pki`.
inline client::ClientOptions TlsClientOptions(const ProvisionedFiles& pki, size_t index,
                                              const std::string& address) {
  client::ClientOptions co;
  co.server_address = address;
  co.ca_cert_path = pki.ca_cert;
  co.cert_path = pki.client_certs[index];
  co.key_path = pki.client_keys[index];
  co.server_name_override = "localhost";
  return co;
}

// In a forked client process: runs an SDK client with `options` and `trainer` to DONE, then
// exits 0 (1 on any error, printed with the client's `index`).
[[noreturn]] inline void RunClientAndExit(const client::ClientOptions& options,
                                          client::Trainer* trainer, int index) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options, trainer);
  if (!c.ok()) {
    std::fprintf(stderr, "client %d: %s\n", index, c.status().ToString().c_str());
    _exit(1);
  }
  const absl::Status done = (*c)->Run();
  if (!done.ok()) std::fprintf(stderr, "client %d: %s\n", index, done.ToString().c_str());
  c->reset();
  _exit(done.ok() ? 0 : 1);
}

// A CA, a server certificate and `clients` client certificates ("site-0", ...) under
// `work_dir`/certs.
inline ProvisionedFiles ProvisionSites(const std::string& work_dir, int clients) {
  ProvisionOptions po;
  po.out_dir = work_dir + "/certs";
  for (int i = 0; i < clients; ++i) po.client_names.push_back(absl::StrCat("site-", i));
  return Check(ProvisionFederation(po), "provision");
}

}  // namespace fl::bench

#endif  // FL_BENCH_BENCH_FEDERATION_H_
