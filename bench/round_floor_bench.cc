// The floor of a federated round over gRPC with mutual TLS (issue 6, benchmark 4): what moving a
// round's bytes costs on this machine whatever the framework does. A floor, not a framework: no
// storage, no hashing, no checkpoint, no aggregation, no validation, no per-call identity checks.
// Workload: the same as flower_compare_bench's (N client processes, a model of one float32 tensor
// of P parameters, R rounds of which round 1 is a warm-up, mutual TLS on 127.0.0.1 with the same
// certificates and channel and server arguments as ingestion_bench's bare side), served by a bare
// gRPC service (bench/round_floor.proto, fl.bench.v1.RoundFloor) on the sync API:
//   WaitRound(round): a long poll; returns once the server has opened that round. Round 1 is open
//                     at start; round k+1 opens the moment all N uploads of round k have arrived.
//   Download:         streams the global model's P x 4 bytes in messages of at most 1 MiB, from
//                     messages built once (gRPC's typed API serializes them per call).
//   Upload:           reads and discards; the last message read counts the upload for its round.
// Per round each client does exactly WaitRound(k) -> Download -> Upload of the bytes it received
// (no training); after round R it calls WaitRound(R + 1) to hear that the run is over.
//   round_floor_bench [--clients 10] [--params 100000] [--rounds 41] [--workload a]
//                     [--work-dir /tmp/round_floor_bench] [--plaintext]
// --plaintext is a diagnostic: insecure credentials on both sides, to show what TLS costs.
//
// Measured, in the server process (this one), on CLOCK_MONOTONIC:
//   round period: from round k's opening to round k+1's, median (min, max) over rounds 2..R.
//   CPU per round: the server process's CPU (getrusage) and the clients' (each reports its own
//                  with WaitRound) from round 2's opening to the end, over R - 1 rounds.
// Processes as in flower_compare_bench: this process provisions the certificates, forks the N
// clients before it creates any gRPC object or thread, then serves and hands each client the port
// through a pipe. Prints a short table and one line starting with "RESULT side=floor".
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_federation.h"
#include "bench/round_floor.grpc.pb.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/model.h"
#include "fl/common/provision.h"
#include "grpcpp/grpcpp.h"

namespace {

using fl::bench::Check;
using fl::bench::Die;
using fl::bench::Median;
using fl::bench::MonotonicSeconds;
using fl::bench::ProcessCpuSeconds;
namespace pb = fl::bench::v1;

constexpr auto kRpcDeadline = std::chrono::seconds(60);
// The server gives up when no round opens for this long.
constexpr double kStallSeconds = 60;

std::string Slurp(const std::string& path) { return Check(fl::ReadFile(path), "read PEM"); }

int64_t ModelBytes(int64_t params) { return params * static_cast<int64_t>(sizeof(float)); }

// ---- the clients -------------------------------------------------------------------------------

// Returns "" on success, else what failed.
std::string RunRounds(pb::RoundFloor::Stub& stub, int64_t params, int rounds) {
  const int64_t want = ModelBytes(params);
  auto deadline = [] { return std::chrono::system_clock::now() + kRpcDeadline; };
  std::vector<pb::Blob> blobs;
  for (int k = 1; k <= rounds + 1; ++k) {
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      pb::RoundRequest req;
      req.set_round(k);
      req.set_client_cpu_s(ProcessCpuSeconds());
      pb::RoundReply reply;
      const grpc::Status s = stub.WaitRound(&ctx, req, &reply);
      if (!s.ok()) return absl::StrCat("WaitRound ", k, ": ", s.error_message());
      if (reply.round() < k) return absl::StrCat("WaitRound ", k, ": got ", reply.round());
    }
    if (k > rounds) break;  // the run is over
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      std::unique_ptr<grpc::ClientReader<pb::Blob>> reader =
          stub.Download(&ctx, pb::DownloadRequest());
      size_t n = 0;
      int64_t got = 0;
      for (;; ++n) {
        if (n == blobs.size()) blobs.emplace_back();
        if (!reader->Read(&blobs[n])) break;
        got += static_cast<int64_t>(blobs[n].data().size());
      }
      const grpc::Status s = reader->Finish();
      if (!s.ok()) return absl::StrCat("Download ", k, ": ", s.error_message());
      if (got != want) return absl::StrCat("Download ", k, ": ", got, " bytes, not ", want);
      blobs.resize(n);
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      pb::RoundAck ack;
      std::unique_ptr<grpc::ClientWriter<pb::Blob>> writer = stub.Upload(&ctx, &ack);
      bool ok = true;
      for (size_t i = 0; ok && i < blobs.size(); ++i) {
        blobs[i].set_round(i == 0 ? k : 0);
        ok = writer->Write(blobs[i]);
      }
      if (ok) writer->WritesDone();
      const grpc::Status s = writer->Finish();
      if (!s.ok()) return absl::StrCat("Upload ", k, ": ", s.error_message());
      if (ack.bytes() != want) return absl::StrCat("Upload ", k, ": acked ", ack.bytes());
    }
  }
  return "";
}

// A client process: waits for the port on `port_fd`, runs every round, exits 0 on success.
[[noreturn]] void ClientProcess(int port_fd, const fl::ProvisionedFiles& pki, int index,
                                int64_t params, int rounds, bool plaintext) {
  int port = 0;
  if (read(port_fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)) || port <= 0) {
    _exit(3);  // the server failed before it could start
  }
  close(port_fd);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (plaintext) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Slurp(pki.ca_cert);
    ssl.pem_cert_chain = Slurp(pki.client_certs[static_cast<size_t>(index)]);
    ssl.pem_private_key = Slurp(pki.client_keys[static_cast<size_t>(index)]);
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;  // as the SDK's channel (and ingestion_bench's bare client)
  args.SetMaxReceiveMessageSize(2 * static_cast<int>(fl::kMaxChunkBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  if (!plaintext) args.SetSslTargetNameOverride("localhost");
  std::string error;
  {
    std::unique_ptr<pb::RoundFloor::Stub> stub = pb::RoundFloor::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), creds, args));
    error = RunRounds(*stub, params, rounds);
  }
  if (!error.empty()) std::fprintf(stderr, "client %d: %s\n", index, error.c_str());
  _exit(error.empty() ? 0 : 1);
}

// ---- the server --------------------------------------------------------------------------------

class RoundFloorService final : public pb::RoundFloor::Service {
 public:
  RoundFloorService(int clients, int rounds, int64_t params)
      : clients_(clients), rounds_(rounds), want_(ModelBytes(params)) {
    open_at_.assign(static_cast<size_t>(rounds) + 2, 0);
    uploads_.assign(static_cast<size_t>(rounds) + 1, 0);
    client_cpu_.assign(static_cast<size_t>(rounds) + 2, 0);
    // The global model, built once: P float32 values cut into messages of at most 1 MiB.
    std::vector<float> model(static_cast<size_t>(params));
    for (size_t i = 0; i < model.size(); ++i) model[i] = static_cast<float>(i % 1000) * 1e-3f;
    const char* bytes = reinterpret_cast<const char*>(model.data());
    for (int64_t off = 0; off < want_; off += fl::kMaxChunkBytes) {
      blobs_.emplace_back().set_data(bytes + off,
                                     std::min<int64_t>(fl::kMaxChunkBytes, want_ - off));
    }
  }

  // Opens round 1 (now).
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    OpenLocked(1);
  }

  grpc::Status WaitRound(grpc::ServerContext* ctx, const pb::RoundRequest* req,
                         pb::RoundReply* reply) override {
    const int64_t k = req->round();
    if (k < 1 || k > rounds_ + 1) return {grpc::StatusCode::INVALID_ARGUMENT, "bad round"};
    std::unique_lock<std::mutex> lock(mu_);
    client_cpu_[static_cast<size_t>(k)] += req->client_cpu_s();
    if (k == rounds_ + 1 && ++final_waits_ == clients_) cv_.notify_all();
    while (open_ < k) {
      if (stop_ || ctx->IsCancelled()) return {grpc::StatusCode::CANCELLED, "stopped"};
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
    reply->set_round(open_);
    return grpc::Status::OK;
  }

  grpc::Status Download(grpc::ServerContext*, const pb::DownloadRequest*,
                        grpc::ServerWriter<pb::Blob>* writer) override {
    for (const pb::Blob& b : blobs_) {
      if (!writer->Write(b)) return {grpc::StatusCode::UNAVAILABLE, "write failed"};
    }
    return grpc::Status::OK;
  }

  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<pb::Blob>* reader,
                      pb::RoundAck* ack) override {
    pb::Blob blob;
    int64_t bytes = 0;
    int64_t round = -1;
    while (reader->Read(&blob)) {
      if (round < 0) round = blob.round();
      bytes += static_cast<int64_t>(blob.data().size());
    }
    ack->set_bytes(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (round != open_ || bytes != want_) {
      failed_ = true;
      cv_.notify_all();
      return {grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("upload for round ", round, " of ", bytes, " bytes; open ", open_)};
    }
    if (++uploads_[static_cast<size_t>(round)] == clients_) OpenLocked(round + 1);
    return grpc::Status::OK;
  }

  // Waits until round R + 1 opened and every client asked for it, so that each is answered before
  // the server shuts down (true); or an upload was refused, or nothing moved for kStallSeconds
  // (false).
  bool WaitFinished() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (open_ > rounds_ && final_waits_ == clients_) return true;
      if (failed_) return false;
      const int64_t seen = open_;
      const int seen_waits = final_waits_;
      const bool progressed = cv_.wait_for(lock, std::chrono::duration<double>(kStallSeconds), [&] {
        return open_ != seen || final_waits_ != seen_waits || failed_;
      });
      if (!progressed) return false;
    }
  }

  // Makes every waiting WaitRound return.
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }

  // Figures, read after the run.
  int64_t open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  // Round k's opening (CLOCK_MONOTONIC s), k = 1 .. R + 1 (R + 1: the end); 0 if not yet.
  double open_at(int64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    return open_at_[static_cast<size_t>(k)];
  }
  // This process's CPU s at round 2's opening and at the end.
  double server_cpu_at(int64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    return k == 2 ? cpu_at_round2_ : cpu_at_end_;
  }
  // The sum of the clients' CPU s as they asked for round k.
  double client_cpu(int64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    return client_cpu_[static_cast<size_t>(k)];
  }

 private:
  void OpenLocked(int64_t k) {
    const double now = MonotonicSeconds();
    open_ = k;
    open_at_[static_cast<size_t>(k)] = now;
    if (k == 2) cpu_at_round2_ = ProcessCpuSeconds();
    if (k == rounds_ + 1) cpu_at_end_ = ProcessCpuSeconds();
    cv_.notify_all();
  }

  const int clients_;
  const int rounds_;
  const int64_t want_;
  std::vector<pb::Blob> blobs_;  // immutable after construction
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t open_ = 0;
  int final_waits_ = 0;  // clients that asked for round R + 1 (the end)
  bool failed_ = false;
  bool stop_ = false;
  std::vector<double> open_at_;
  std::vector<int> uploads_;
  std::vector<double> client_cpu_;
  double cpu_at_round2_ = 0, cpu_at_end_ = 0;
};

// A finished run: its service (the figures) and whether round R + 1 opened.
struct Run {
  std::unique_ptr<RoundFloorService> service;
  bool ok = false;
};

// Serves the run with this process's clients on `port_fds` until round R + 1 opens or the run
// fails (an upload refused, or no round opened for kStallSeconds).
Run Serve(const fl::ProvisionedFiles& pki, std::vector<int>& port_fds, int clients,
          int rounds, int64_t params, bool plaintext) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (plaintext) {
    creds = grpc::InsecureServerCredentials();
  } else {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = Slurp(pki.ca_cert);
    ssl.pem_key_cert_pairs.push_back({Slurp(pki.server_key), Slurp(pki.server_cert)});
    creds = grpc::SslServerCredentials(ssl);
  }
  auto service = std::make_unique<RoundFloorService>(clients, rounds, params);
  int port = 0;
  grpc::ServerBuilder builder;  // as the real server's (and ingestion_bench's bare server)
  builder.AddListeningPort("127.0.0.1:0", creds, &port);
  builder.RegisterService(service.get());
  builder.SetMaxReceiveMessageSize(2 * static_cast<int>(fl::kMaxChunkBytes));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 15000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) Die("round floor server: cannot listen");
  service->Start();
  fl::bench::HandOutPort(port_fds, port);
  const bool ok = service->WaitFinished();
  service->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return Run{std::move(service), ok};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The floor of a federated round: bare gRPC long poll, download and upload");
  int clients = 10;
  int64_t params = 100000;
  int rounds = 41;
  std::string work_dir = "/tmp/round_floor_bench";
  bool plaintext = false;
  app.add_option("--clients", clients)->check(CLI::Range(1, 64));
  app.add_option("--params", params, "float32 parameters (one tensor)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 28));
  app.add_option("--rounds", rounds, "Rounds, the first a warm-up")->check(CLI::Range(2, 10000));
  app.add_option("--work-dir", work_dir, "Certificates go here (removed at the end)");
  std::string workload;
  app.add_option("--workload", workload, "Label echoed in the RESULT line");
  app.add_flag("--plaintext", plaintext,
               "Diagnostic only: insecure credentials, to show what TLS costs");
  CLI11_PARSE(app, argc, argv);
  if (!std::getenv("FL_LOG_LEVEL")) fl::SetLogLevel(fl::LogLevel::kError);

  std::filesystem::remove_all(work_dir);
  const fl::ProvisionedFiles pki = fl::bench::ProvisionSites(work_dir, clients);

  // Every client is forked now, before any gRPC object or thread exists in this process.
  fl::bench::Clients sites =
      fl::bench::ForkClients(clients, /*close_in_child=*/-1, [&](int fd, int i) {
        ClientProcess(fd, pki, i, params, rounds, plaintext);
      });
  const std::vector<pid_t>& pids = sites.pids;

  const double launch = MonotonicSeconds();
  const Run run = Serve(pki, sites.port_fds, clients, rounds, params, plaintext);
  const bool ok = run.ok;
  RoundFloorService* service = run.service.get();
  if (!ok) {
    for (pid_t pid : pids) kill(pid, SIGKILL);  // our own children, stuck or failing
  }
  const int failed_clients = fl::bench::ReapClients(pids, "floor");
  const double wall_s = MonotonicSeconds() - launch;
  std::filesystem::remove_all(work_dir);

  // Round k's period: from its opening to round k+1's, k = 2 .. R.
  std::vector<double> periods;
  for (int64_t k = 2; k <= rounds && k + 1 <= service->open(); ++k) {
    periods.push_back(service->open_at(k + 1) - service->open_at(k));
  }
  const double med = Median(periods);
  const double lo = periods.empty() ? 0 : *std::min_element(periods.begin(), periods.end());
  const double hi = periods.empty() ? 0 : *std::max_element(periods.begin(), periods.end());
  const int completed = static_cast<int>(std::max<int64_t>(0, service->open() - 1));
  double server_cpu_ms = 0, client_cpu_ms = 0;
  if (ok) {
    const double measured = rounds - 1;
    server_cpu_ms =
        1e3 * (service->server_cpu_at(rounds + 1) - service->server_cpu_at(2)) / measured;
    client_cpu_ms = 1e3 * (service->client_cpu(rounds + 1) - service->client_cpu(2)) / measured;
  }
  const unsigned cores = std::thread::hardware_concurrency();

  std::printf(
      "floor (bare gRPC, no framework): %d client processes, %lld float32 parameters "
      "(%lld bytes, messages <= 1 MiB), %d rounds (1 warm-up), %s on 127.0.0.1, sync "
      "server; per round each client: WaitRound long poll -> Download -> Upload of the "
      "same bytes; %u cores\n",
      clients, static_cast<long long>(params), static_cast<long long>(ModelBytes(params)), rounds,
      plaintext ? "PLAINTEXT (diagnostic)" : "mutual TLS", cores);
  std::printf(
      "| round period median ms | min ms | max ms | rounds | clients "
      "| server CPU ms/round | clients CPU ms/round | failed clients | wall s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %.2f | %.2f | %.2f | %d | %d | %.2f | %.2f | %d | %.1f |\n", med * 1e3, lo * 1e3,
              hi * 1e3, completed, clients, server_cpu_ms, client_cpu_ms, failed_clients, wall_s);
  std::printf(
      "RESULT side=%s workload=%s clients=%d params=%lld rounds=%d failures=%d "
      "period_median_s=%.6f period_min_s=%.6f period_max_s=%.6f server_cpu_ms_per_round=%.3f "
      "client_cpu_ms_per_round=%.3f cores=%u wall_s=%.2f\n",
      plaintext ? "floor-plaintext" : "floor", workload.c_str(), clients,
      static_cast<long long>(params), completed, failed_clients, med, lo, hi, server_cpu_ms,
      client_cpu_ms, cores, wall_s);
  if (!ok) std::fprintf(stderr, "floor: the run failed or stalled at round %d\n", completed + 1);
  return ok && completed == rounds && failed_clients == 0 ? 0 : 1;
}
