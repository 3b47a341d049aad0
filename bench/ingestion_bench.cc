// Ingestion: one SDK client uploading a 1 GiB update (268,435,456 float32 values) to the real
// server over mutual TLS, next to a bare gRPC client stream of the same bytes in 1 MiB chunks over
// mutual TLS, alternating in the same run. Goal (issue 6): ours at least 70 % of the bare stream.
// The real server runs twice per repetition: "ours" with default options (the default
// configuration: a fixed per-upload flow-control window, ServerOptions::stream_window_mib = 4)
// and "ours (auto window)" with stream_window_mib = 0 (gRPC's own BDP-probe-tuned window: faster
// alone, more memory per concurrent upload; see server_memory_bench for that side).
//   ingestion_bench [--reps 3] [--model-mib 1024] [--work-dir /tmp/ingestion_bench]
//                   [--no-auto-window] [--print-times]
// --no-auto-window skips "ours (auto window)".
// --print-times adds each repetition's start on CLOCK_MONOTONIC, to cut a profile taken with
// `perf record -k CLOCK_MONOTONIC` to the upload (perf report --time START,END).
//
// Processes: this process provisions the certificates, then forks every client (per repetition one
// SDK client for "ours", one for "ours (auto window)", one bare client for "bare") before it
// creates any gRPC object or thread; each waits on a pipe for its server's port. This process then
// runs, in turn per repetition, a fresh real server (fl::server::Server: one round, one client,
// float32 updates, FedAvg), the same with the auto window, and a bare gRPC server
// (bench/bare_stream.proto, Upload(stream Chunk) returns (Ack): reads and discards). Server CPU is
// therefore this process's getrusage, client CPU the child's.
//
// Timing, on CLOCK_MONOTONIC (one clock across the processes):
// - start. Ours: inside the trainer's Fit, just before it returns (the SDK then checks the spec and
//   submits: metadata, 1 MiB chunks each hashed into the client's running SHA-256, the digest).
//   Bare: just before the stream opens; a warm-up call first connected the channel and did the
//   TLS handshake, as ours did with its Join, Poll and Download. The client sends the instant
//   down a pipe, and a thread here takes getrusage as it arrives.
// - ours "verified+staged": the server's first read-back of the spill file (inotify IN_ACCESS on
//   the spill directory). By then every chunk was checked (order, finite values, running SHA-256)
//   and written to the spill, and the digest matched: the fold starts.
// - ours "folded" (ingested): the engine's on_update hook, called once the update is folded into
//   the round's aggregate and accepted, before the reply goes out.
// - bare "received": the handler's last Read returned (every byte read and discarded).
// - "reply at client": ours, the SDK's on_task callback; bare, Finish returning. Ours also waits
//   for the round's commit (the engine closes the round inside the last uploader's call), so it is
//   shown but not used in the ratio.
// Why from outside: the SDK's upload (Client::Impl::SubmitPayload) is private to client_sdk/src;
// the trainer's return and the server's hook and spill events bracket it without touching it.
// MB/s = 2^30 bytes / seconds / 10^6. Ratio = median ours "folded" MB/s / median bare MB/s, one
// line for ours (the default configuration) and one for ours (auto window).
#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bare_stream.grpc.pb.h"
#include "bench/bench_federation.h"
#include "fl/client/client.h"
#include "fl/client/trainer.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/model.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "grpcpp/grpcpp.h"

namespace {

using fl::bench::Check;
using fl::bench::LoadAverage;
using fl::bench::Median;
using fl::bench::MonotonicSeconds;
using fl::bench::ProcessCpuSeconds;
using fl::bench::Die;
using fl::bench::SpecOfMiB;

// The update's change: every 1024th value moves. Ours applies it to the downloaded global model
// (zeros), bare to zeros, so both send the same bytes.
void Perturb(std::span<float> v) {
  for (size_t i = 0; i < v.size(); i += 1024) v[i] += 1e-3f * static_cast<float>((i >> 10) % 7);
}

// What a client process sends up its pipe: first its start, then its result.
struct Mark {
  int kind = 0;  // kStart or kResult
  int ok = 0;
  double t = 0;      // start (monotonic s)
  double cpu = 0;    // the client process's CPU s at start
  double t_end = 0;  // reply at the client
  double cpu_end = 0;
  char error[256] = {};
};
constexpr int kStart = 1;
constexpr int kResult = 2;

void Send(int fd, const Mark& m) {
  if (write(fd, &m, sizeof(m)) != static_cast<ssize_t>(sizeof(m))) _exit(4);
}

// A forked client: the parent writes its server's port to `port_fd` and reads Marks from `mark_fd`.
struct Child {
  pid_t pid = -1;
  int port_fd = -1;
  int mark_fd = -1;
};

// Forks a child that runs `body(port_fd, mark_fd)` and never returns; it first closes the parent's
// ends of the children forked before it (`others`).
Child ForkClient(const std::vector<Child>& others, const std::function<void(int, int)>& body) {
  int port[2];
  int mark[2];
  if (pipe(port) != 0 || pipe(mark) != 0) Die("pipe");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    for (const Child& c : others) {
      close(c.port_fd);
      close(c.mark_fd);
    }
    close(port[1]);
    close(mark[0]);
    body(port[0], mark[1]);
    _exit(1);
  }
  close(port[0]);
  close(mark[1]);
  return Child{pid, port[1], mark[0]};
}

int ReadPort(int fd) {
  int port = 0;
  if (read(fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)) || port <= 0) _exit(3);
  close(fd);
  return port;
}

// ---- ours: the real server and the SDK ---------------------------------------------------------

// Returns the global model plus Perturb, and marks the start of the upload as it returns.
class UploadTrainer final : public fl::client::Trainer {
 public:
  UploadTrainer(fl::ModelSpec spec, int mark_fd, Mark* mark)
      : spec_(std::move(spec)), mark_fd_(mark_fd), mark_(mark) {}
  fl::ModelSpec spec() const override { return spec_; }
  absl::StatusOr<fl::client::FitResult> Fit(const fl::Model& global,
                                            const fl::client::FitConfig&) override {
    absl::StatusOr<fl::client::FitResult> r(
        fl::client::FitResult{.model = global.Clone(), .num_examples = 100, .metrics = {}});
    Perturb(r->model.data());
    mark_->kind = kStart;
    mark_->cpu = ProcessCpuSeconds();
    mark_->t = MonotonicSeconds();
    Send(mark_fd_, *mark_);
    return r;
  }
  absl::StatusOr<fl::client::EvalResult> Evaluate(const fl::Model&) override {
    return absl::UnimplementedError("no evaluation in this benchmark");
  }

 private:
  fl::ModelSpec spec_;
  int mark_fd_;
  Mark* mark_;
};

[[noreturn]] void OursClient(int port_fd, int mark_fd, const fl::ProvisionedFiles& pki,
                             int64_t model_mib) {
  const int port = ReadPort(port_fd);
  Mark mark;
  UploadTrainer trainer(SpecOfMiB(model_mib), mark_fd, &mark);
  fl::client::ClientOptions co =
      fl::bench::TlsClientOptions(pki, 0, absl::StrCat("127.0.0.1:", port));
  co.poll_wait = absl::Seconds(2);
  absl::Status status;
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(co, &trainer);
  if (client.ok()) {
    (*client)->set_on_task([&](const fl::client::TaskReport& r) {
      mark.t_end = MonotonicSeconds();
      mark.cpu_end = ProcessCpuSeconds();
      mark.ok = r.status.ok();
      if (!r.status.ok()) {
        std::snprintf(mark.error, sizeof(mark.error), "%s", r.status.ToString().c_str());
      }
    });
    status = (*client)->Run();
    client->reset();
  } else {
    status = client.status();
  }
  if (!status.ok() && mark.error[0] == '\0') {
    std::snprintf(mark.error, sizeof(mark.error), "%s", status.ToString().c_str());
  }
  mark.kind = kResult;
  Send(mark_fd, mark);
  _exit(0);
}

// Times events on the files of the spill directory: last written, and first read back (with this
// process's CPU at that instant).
class SpillWatcher {
 public:
  explicit SpillWatcher(const std::string& dir) {
    fd_ = inotify_init1(IN_CLOEXEC);
    if (fd_ < 0 || inotify_add_watch(fd_, dir.c_str(), IN_MODIFY | IN_ACCESS) < 0) {
      Die(absl::StrCat("inotify on ", dir));
    }
    thread_ = std::thread([this] { Loop(); });
  }
  ~SpillWatcher() { Stop(); }
  // Stops watching; the figures below are final from then on.
  void Stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
    close(fd_);
  }
  double last_write = 0, first_read = 0, first_read_cpu = 0;

 private:
  void Loop() {
    alignas(inotify_event) char buf[64 * 1024];
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = read(fd_, buf, sizeof(buf));
      const double now = MonotonicSeconds();
      for (ssize_t off = 0; off < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
        off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
        if (e->len == 0 || !absl::EndsWith(e->name, ".part")) continue;
        if (e->mask & IN_MODIFY) last_write = now;
        if ((e->mask & IN_ACCESS) && first_read == 0) {
          first_read = now;
          first_read_cpu = ProcessCpuSeconds();
        }
      }
    }
  }
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Reads a client's Marks: on its start, takes this process's clock and CPU at once.
class MarkReader {
 public:
  explicit MarkReader(int fd)
      : thread_([this, fd] {
          Mark m;
          while (read(fd, &m, sizeof(m)) == static_cast<ssize_t>(sizeof(m))) {
            if (m.kind == kStart) {
              server_cpu_at_start = ProcessCpuSeconds();
              start = m;
            } else {
              result = m;
            }
          }
          close(fd);
        }) {}
  void Join() { thread_.join(); }
  Mark start, result;
  double server_cpu_at_start = 0;

 private:
  std::thread thread_;
};

// One repetition's figures. Times are from the client's start; "end" is folded (ours) or
// received (bare).
struct Rep {
  bool ok = false;
  std::string error;
  double staged_s = 0, staged_cpu = 0;  // ours: verified+staged (fold starts)
  double last_write_s = 0;              // ours: last chunk written to the spill
  double end_s = 0, end_cpu = 0;        // server side: folded / received
  double reply_s = 0;                   // reply at the client
  double client_cpu = 0;                // client process, start to reply
  double commit_s = 0;                  // ours: round committed, from the start
  double start = 0;                     // the client's start, CLOCK_MONOTONIC s
};

// `auto_window`: stream_window_mib = 0 (gRPC's probe-tuned window) instead of the default.
Rep RunOurs(const fl::ProvisionedFiles& pki, const std::string& dir, int64_t model_mib,
            const Child& client, bool auto_window) {
  std::filesystem::remove_all(dir);
  fl::server::ServerOptions so = fl::bench::TlsServerOptions(pki, dir);
  if (auto_window) so.stream_window_mib = 0;
  so.engine.run_name = "ingestion";
  so.engine.min_clients = 1;
  so.engine.min_fit_clients = 1;
  so.engine.round_timeout = absl::Minutes(30);
  so.engine.max_round_retries = 0;
  so.engine.wait_timeout = absl::Minutes(5);
  so.max_poll_wait = absl::Seconds(2);
  std::mutex mu;
  double folded = 0, folded_cpu = 0, committed_at = 0;
  bool committed = false;
  std::string reason;
  fl::server::EngineHooks hooks;
  hooks.on_update = [&](const absl::Status& s, int64_t) {
    const double t = MonotonicSeconds();
    const double cpu = ProcessCpuSeconds();
    std::lock_guard<std::mutex> lock(mu);
    if (s.ok()) {
      folded = t;
      folded_cpu = cpu;
    }
  };
  hooks.on_round_end = [&](const fl::server::RoundSummary& s) {
    std::lock_guard<std::mutex> lock(mu);
    committed = s.committed;
    committed_at = MonotonicSeconds();
    reason = s.reason;
  };
  std::unique_ptr<fl::server::Server> server =
      Check(fl::server::Server::Start(so, fl::Model(SpecOfMiB(model_mib)), hooks), "server start");
  Rep rep;
  {
    SpillWatcher spill(dir + "/spill");
    MarkReader marks(client.mark_fd);
    const int port = server->port();
    if (write(client.port_fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) {
      Die("write port");
    }
    close(client.port_fd);
    server->WaitUntilFinished(absl::Seconds(3));
    int status = 0;
    waitpid(client.pid, &status, 0);
    marks.Join();
    server->Shutdown();
    spill.Stop();
    std::lock_guard<std::mutex> lock(mu);
    const Mark& r = marks.result;
    const double t0 = marks.start.t;
    rep.ok = r.ok && committed && folded > 0 && spill.first_read > 0 && t0 > 0;
    rep.error = r.error[0] ? r.error : (committed ? "" : absl::StrCat("round: ", reason));
    rep.staged_s = spill.first_read - t0;
    rep.staged_cpu = spill.first_read_cpu - marks.server_cpu_at_start;
    rep.last_write_s = spill.last_write - t0;
    rep.end_s = folded - t0;
    rep.end_cpu = folded_cpu - marks.server_cpu_at_start;
    rep.reply_s = r.t_end - t0;
    rep.client_cpu = r.cpu_end - r.cpu;
    rep.commit_s = committed_at - t0;
    rep.start = t0;
  }
  server.reset();
  std::filesystem::remove_all(dir);
  return rep;
}

// ---- bare: a gRPC stream that reads and discards -----------------------------------------------

class BareService final : public fl::bench::v1::BareStream::Service {
 public:
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<fl::bench::v1::Chunk>* reader,
                      fl::bench::v1::Ack* ack) override {
    fl::bench::v1::Chunk chunk;
    int64_t bytes = 0;
    while (reader->Read(&chunk)) bytes += static_cast<int64_t>(chunk.data().size());
    const double t = MonotonicSeconds();
    const double cpu = ProcessCpuSeconds();
    ack->set_bytes(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    last_end_ = t;
    last_cpu_ = cpu;
    last_bytes_ = bytes;
    return grpc::Status::OK;
  }
  // The last call's end, CPU then and bytes.
  void Last(double& t, double& cpu, int64_t& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    t = last_end_, cpu = last_cpu_, bytes = last_bytes_;
  }

 private:
  std::mutex mu_;
  double last_end_ = 0, last_cpu_ = 0;
  int64_t last_bytes_ = 0;
};

std::string Slurp(const std::string& path) { return Check(fl::ReadFile(path), "read PEM"); }

[[noreturn]] void BareClient(int port_fd, int mark_fd, const fl::ProvisionedFiles& pki,
                             int64_t model_mib) {
  const int port = ReadPort(port_fd);
  fl::Model payload(SpecOfMiB(model_mib));
  Perturb(payload.data());
  const std::span<const std::byte> bytes = payload.bytes();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Slurp(pki.ca_cert);
  ssl.pem_cert_chain = Slurp(pki.client_certs[0]);
  ssl.pem_private_key = Slurp(pki.client_keys[0]);
  grpc::ChannelArguments args;  // as the SDK's channel
  args.SetMaxReceiveMessageSize(2 * static_cast<int>(fl::kMaxChunkBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetSslTargetNameOverride("localhost");
  auto stub = fl::bench::v1::BareStream::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl), args));
  // Sends `n` bytes of the payload in 1 MiB chunks on one stream.
  auto upload = [&](size_t n) {
    grpc::ClientContext ctx;
    fl::bench::v1::Ack ack;
    std::unique_ptr<grpc::ClientWriter<fl::bench::v1::Chunk>> writer = stub->Upload(&ctx, &ack);
    fl::bench::v1::Chunk chunk;
    bool ok = true;
    for (size_t off = 0; ok && off < n; off += fl::kMaxChunkBytes) {
      const size_t len = std::min<size_t>(fl::kMaxChunkBytes, n - off);
      chunk.set_data(reinterpret_cast<const char*>(bytes.data()) + off, len);
      ok = writer->Write(chunk);
    }
    if (ok) writer->WritesDone();
    const grpc::Status s = writer->Finish();
    return s.ok() && ack.bytes() == static_cast<int64_t>(n) ? std::string()
                                                            : s.error_message() + " (short)";
  };
  Mark mark;
  std::string error = upload(fl::kMaxChunkBytes);  // warm-up: connection and TLS handshake
  if (error.empty()) {
    mark.kind = kStart;
    mark.cpu = ProcessCpuSeconds();
    mark.t = MonotonicSeconds();
    Send(mark_fd, mark);
    error = upload(bytes.size());
    mark.t_end = MonotonicSeconds();
    mark.cpu_end = ProcessCpuSeconds();
  }
  mark.kind = kResult;
  mark.ok = error.empty();
  std::snprintf(mark.error, sizeof(mark.error), "%s", error.c_str());
  Send(mark_fd, mark);
  _exit(0);
}

Rep RunBare(const fl::ProvisionedFiles& pki, const Child& client) {
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = Slurp(pki.ca_cert);
  ssl.pem_key_cert_pairs.push_back({Slurp(pki.server_key), Slurp(pki.server_cert)});
  BareService service;
  int port = 0;
  grpc::ServerBuilder builder;  // as the real server's
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(2 * static_cast<int>(fl::kMaxChunkBytes));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 15000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) Die("bare server: cannot listen");
  MarkReader marks(client.mark_fd);
  if (write(client.port_fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) {
    Die("write port");
  }
  close(client.port_fd);
  int status = 0;
  waitpid(client.pid, &status, 0);
  marks.Join();
  server->Shutdown();
  Rep rep;
  double end = 0, end_cpu = 0;
  int64_t got = 0;
  service.Last(end, end_cpu, got);
  const Mark& r = marks.result;
  const double t0 = marks.start.t;
  rep.ok = r.ok && t0 > 0;
  rep.error = r.error;
  rep.end_s = end - t0;
  rep.end_cpu = end_cpu - marks.server_cpu_at_start;
  rep.reply_s = r.t_end - t0;
  rep.client_cpu = r.cpu_end - r.cpu;
  rep.start = t0;
  return rep;
}

// ---- the table ---------------------------------------------------------------------------------

void Row(const std::string& rep, const std::string& path, const std::string& end, double s,
         double gib, double server_cpu, double client_cpu) {
  const double mbs = s > 0 ? gib * 1073.741824 / s : 0;
  std::printf("| %4s | %-18s | %-38s | %8.3f | %8.1f | %14s | %14s |\n", rep.c_str(), path.c_str(),
              end.c_str(), s, mbs,
              server_cpu > 0 ? absl::StrFormat("%.2f", server_cpu / gib).c_str() : "",
              client_cpu > 0 ? absl::StrFormat("%.2f", client_cpu / gib).c_str() : "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Ingestion: a 1 GiB update through the real server against a bare gRPC stream");
  int reps = 3;
  int64_t model_mib = 1024;
  std::string work_dir = "/tmp/ingestion_bench";
  app.add_option("--reps", reps, "Repetitions of each side, alternating")->check(CLI::Range(1, 20));
  app.add_option("--model-mib", model_mib, "Update size (one float32 tensor), MiB")
      ->check(CLI::Range(1, 4096));
  app.add_option("--work-dir", work_dir);
  bool print_times = false;
  app.add_flag("--print-times", print_times, "Print each repetition's start (CLOCK_MONOTONIC s)");
  bool no_auto_window = false;
  app.add_flag("--no-auto-window", no_auto_window,
               "Skip the real server with stream_window_mib = 0 (gRPC's probe-tuned window)");
  CLI11_PARSE(app, argc, argv);
  if (!std::getenv("FL_LOG_LEVEL")) fl::SetLogLevel(fl::LogLevel::kError);

  std::filesystem::remove_all(work_dir);
  fl::ProvisionOptions po;
  po.out_dir = work_dir + "/certs";
  po.client_names = {"site-0"};
  const fl::ProvisionedFiles pki = Check(fl::ProvisionFederation(po), "provision");

  const bool auto_window = !no_auto_window;
  // Every client is forked now, before any gRPC object or thread exists in this process.
  std::vector<Child> ours, ours_auto, bare, all;
  for (int i = 0; i < reps; ++i) {
    ours.push_back(ForkClient(all, [&](int p, int m) { OursClient(p, m, pki, model_mib); }));
    all.push_back(ours.back());
    if (auto_window) {
      ours_auto.push_back(ForkClient(all, [&](int p, int m) { OursClient(p, m, pki, model_mib); }));
      all.push_back(ours_auto.back());
    }
    bare.push_back(ForkClient(all, [&](int p, int m) { BareClient(p, m, pki, model_mib); }));
    all.push_back(bare.back());
  }

  const double gib = static_cast<double>(model_mib) / 1024.0;
  const fl::server::ServerOptions default_options;
  const int default_window_mib = default_options.stream_window_mib;
  std::printf(
      "Workload: a %lld MiB float32 update (%lld values), one client, %d repetition(s) "
      "of each side alternating (%s); mutual TLS on 127.0.0.1; 1 MiB chunks. "
      "Ours: fl::server::Server (one FedAvg round) + SDK client, default options (the default "
      "configuration: upload window %d MiB, fixed). %sBare: gRPC client "
      "stream, server reads and discards. Times from the client's start of the upload. "
      "MB = 10^6 bytes; CPU in s per GiB, process totals over the same interval.\n",
      static_cast<long long>(model_mib), static_cast<long long>(model_mib) << 18, reps,
      auto_window ? "ours, ours (auto window), bare" : "ours first", default_window_mib,
      auto_window ? "Ours (auto window): the same with stream_window_mib = 0 (gRPC's own "
                    "BDP-probe-tuned window; not the default). "
                  : "");
  std::printf("Cores: %u; load average at start: %s\n", std::thread::hardware_concurrency(),
              LoadAverage().c_str());
  std::fflush(stdout);

  // Per repetition: ours, ours (auto window), bare; auto_reps stays empty without the auto window.
  std::vector<Rep> ours_reps, auto_reps, bare_reps;
  for (int i = 0; i < reps; ++i) {
    ours_reps.push_back(
        RunOurs(pki, absl::StrCat(work_dir, "/server-", i), model_mib, ours[i], false));
    if (auto_window) {
      auto_reps.push_back(
          RunOurs(pki, absl::StrCat(work_dir, "/server-auto-", i), model_mib, ours_auto[i], true));
    }
    bare_reps.push_back(RunBare(pki, bare[i]));
  }

  std::printf("\n| %4s | %-18s | %-38s | %8s | %8s | %14s | %14s |\n", "rep", "path",
              "end point", "s", "MB/s", "server CPU/GiB", "client CPU/GiB");
  std::printf(
      "|------|--------------------|----------------------------------------|----------|----------|"
      "----------------|----------------|\n");
  // The rows of one repetition (or of the medians, `ok` taken as true).
  const std::string kAuto = "ours (auto window)";
  auto ours_rows = [&](const std::string& n, const std::string& path, const Rep& o) {
    Row(n, path, "verified+staged (fold starts)", o.staged_s, gib, o.staged_cpu, 0);
    Row(n, path, "folded into the aggregate (ingested)", o.end_s, gib, o.end_cpu, 0);
    Row(n, path, "reply at client (after round commit)", o.reply_s, gib, 0, o.client_cpu);
  };
  auto rows = [&](const std::string& n, const Rep& o, const Rep* a, const Rep& b) {
    ours_rows(n, "ours", o);
    if (a != nullptr) ours_rows(n, kAuto, *a);
    Row(n, "bare", "received (read and discarded)", b.end_s, gib, b.end_cpu, 0);
    Row(n, "bare", "reply at client", b.reply_s, gib, 0, b.client_cpu);
  };
  bool all_ok = true;
  std::vector<Rep> good_ours, good_auto, good_bare;
  std::vector<std::string> notes;
  auto ours_note = [&](const std::string& path, int i, const Rep& o) {
    notes.push_back(absl::StrFormat(
        "%s rep %d: last chunk staged at %.3f s, fold %.3f s, round committed at %.3f s",
        path, i + 1, o.last_write_s, o.end_s - o.staged_s, o.commit_s));
  };
  for (int i = 0; i < reps; ++i) {
    const Rep& o = ours_reps[i];
    const Rep* a = auto_window ? &auto_reps[i] : nullptr;
    const Rep& b = bare_reps[i];
    if (!o.ok || (a != nullptr && !a->ok) || !b.ok) {
      all_ok = false;
      notes.push_back(absl::StrCat(
          "rep ", i + 1, " FAILED: ours ", o.ok ? "ok" : o.error,
          a == nullptr ? "" : absl::StrCat("; ", kAuto, " ", a->ok ? "ok" : a->error), "; bare ",
          b.ok ? "ok" : b.error));
      continue;
    }
    rows(absl::StrCat(i + 1), o, a, b);
    good_ours.push_back(o);
    if (a != nullptr) good_auto.push_back(*a);
    good_bare.push_back(b);
    ours_note("ours", i, o);
    if (a != nullptr) ours_note(kAuto, i, *a);
    if (print_times) {
      notes.push_back(absl::StrFormat(
          "rep %d: start ours %.6f, %sbare %.6f", i + 1, o.start,
          a == nullptr ? "" : absl::StrFormat("%s %.6f, ", kAuto, a->start), b.start));
    }
  }
  // Each column's median on its own.
  auto median = [](const std::vector<Rep>& v, double Rep::*field) {
    std::vector<double> x;
    for (const Rep& r : v) x.push_back(r.*field);
    return Median(x);
  };
  Rep mo, ma, mb;
  for (double Rep::*f : {&Rep::staged_s, &Rep::staged_cpu, &Rep::end_s, &Rep::end_cpu,
                         &Rep::reply_s, &Rep::client_cpu}) {
    mo.*f = median(good_ours, f);
    ma.*f = median(good_auto, f);
    mb.*f = median(good_bare, f);
  }
  rows("med", mo, auto_window ? &ma : nullptr, mb);
  // One ratio line per configuration of ours; `suffix` follows the goal's verdict.
  auto ratio_line = [&](const std::string& path, const Rep& m, const std::string& suffix) {
    const double ratio = m.end_s > 0 ? mb.end_s / m.end_s : 0;
    std::printf(
        "Ratio %s/bare (median MB/s): folded %.2f, verified+staged %.2f; goal >= 0.70: %s%s\n",
        path.c_str(), ratio, m.staged_s > 0 ? mb.end_s / m.staged_s : 0,
        ratio >= 0.70 ? "pass" : "FAIL", suffix.c_str());
  };
  std::printf("\n");
  ratio_line("ours", mo, "");
  if (auto_window) {
    ratio_line(kAuto, ma,
               absl::StrFormat(" (stream_window_mib = 0, not the default; folded MB/s x%.2f "
                               "ours' with the default %d MiB window)",
                               ma.end_s > 0 ? mo.end_s / ma.end_s : 0, default_window_mib));
  }
  std::printf("Load average at end: %s\n", LoadAverage().c_str());
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  std::filesystem::remove_all(work_dir);
  return all_ok ? 0 : 1;
}
