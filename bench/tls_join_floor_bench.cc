// The floor of N sites joining over gRPC with mutual TLS (issue 14, benchmark 1): what giving
// N sites a certificate each and opening N mutual-TLS channels costs on this machine with this
// gRPC and OpenSSL, whatever the framework does behind the call. A floor, not a framework: the
// server is a bare gRPC service (bench/round_floor.proto, fl.bench.v1.RoundFloor) whose WaitRound
// answers at once. Its credentials are the real server's (a client certificate required, not
// verified by gRPC); the bench then skips what the real server does next (verifying the
// certificate against the CA once, looking up its enrollment, the engine's join).
//
// Workload, in this one process (as `fl sim --transport grpc` runs its sites):
//   certificates: a CA, a server certificate and N site certificates (P-256), in memory, with
//                 fl::CertificateIssuer (the CA parsed once); no files.
//   joins:        for each site, its own channel with its own certificate and key (gRPC
//                 SslCredentials, as the SDK's channel) and one WaitRound call: a TCP connection,
//                 a mutual-TLS 1.3 handshake and one unary call. Channels stay open, as the
//                 simulation's sites keep theirs. --workers threads share the sites.
//   tls_join_floor_bench [--sites 1000] [--workers <cores>] [--reps 3]
// (--workers defaults to the cores, as `fl sim`'s.) Before each repetition's timing one channel
// is opened and called, so that gRPC's and OpenSSL's one-time start-up is not counted. Prints a
// table of medians over the repetitions (each a fresh server and fresh certificates), the CPU of
// the whole process (server, sites and gRPC's threads alike) during the joins, and one line
// starting with "RESULT side=join_floor".
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/round_floor.grpc.pb.h"
#include "fl/common/crypto.h"
#include "grpcpp/grpcpp.h"

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tls_join_floor_bench: %s\n", what.c_str());
  std::exit(1);
}

// Answers every WaitRound at once: the call only proves the channel is up.
class JoinService final : public fl::bench::v1::RoundFloor::Service {
 public:
  grpc::Status WaitRound(grpc::ServerContext*, const fl::bench::v1::RoundRequest* req,
                         fl::bench::v1::RoundReply* reply) override {
    reply->set_round(req->round());
    return grpc::Status::OK;
  }
};

struct Rep {
  double certs_s = 0, joins_s = 0, joins_cpu_s = 0;
};

Rep RunOnce(int sites, int workers) {
  Rep rep;
  Clock::time_point start = Clock::now();
  absl::StatusOr<fl::CertAndKey> ca = fl::MakeCertificateAuthority("join floor CA", 1);
  if (!ca.ok()) Die(std::string(ca.status().message()));
  absl::StatusOr<fl::CertificateIssuer> issuer = fl::CertificateIssuer::Load(*ca);
  if (!issuer.ok()) Die(std::string(issuer.status().message()));
  absl::StatusOr<fl::CertAndKey> server_pair =
      issuer->IssueServer("join floor server", {"localhost", "127.0.0.1"}, 1);
  if (!server_pair.ok()) Die(std::string(server_pair.status().message()));
  std::vector<fl::CertAndKey> site_pairs;
  site_pairs.reserve(static_cast<size_t>(sites));
  for (int i = 0; i < sites; ++i) {
    absl::StatusOr<fl::CertAndKey> pair = issuer->IssueClient(absl::StrCat("site-", i), 1);
    if (!pair.ok()) Die(std::string(pair.status().message()));
    site_pairs.push_back(*std::move(pair));
  }
  rep.certs_s = SecondsSince(start);

  // As the real server (server/daemon/server.cc): the certificate is required in the handshake
  // and checked against the CA by the application afterwards.
  grpc::SslServerCredentialsOptions ssl(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  ssl.pem_root_certs = ca->cert_pem;
  ssl.pem_key_cert_pairs.push_back({server_pair->key_pem, server_pair->cert_pem});
  JoinService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) Die("cannot listen on 127.0.0.1");
  const std::string address = absl::StrCat("127.0.0.1:", port);

  // A site's join: its own channel, with its own certificate, and one call. Returns the channel
  // (kept open, as a simulation's sites keep theirs), or null when the call failed.
  auto join = [&](const fl::CertAndKey& pair) -> std::shared_ptr<grpc::Channel> {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ca->cert_pem;
    options.pem_cert_chain = pair.cert_pem;
    options.pem_private_key = pair.key_pem;
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel(address, grpc::SslCredentials(options));
    auto stub = fl::bench::v1::RoundFloor::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    fl::bench::v1::RoundRequest req;
    req.set_round(1);
    fl::bench::v1::RoundReply reply;
    return stub->WaitRound(&ctx, req, &reply).ok() ? channel : nullptr;
  };
  absl::StatusOr<fl::CertAndKey> warm = issuer->IssueClient("warm-up", 1);
  if (!warm.ok() || join(*warm) == nullptr) Die("the warm-up join failed");

  std::vector<std::shared_ptr<grpc::Channel>> channels(static_cast<size_t>(sites));
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  const double cpu_start = CpuSeconds();
  start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int i = next++; i < sites; i = next++) {
        channels[static_cast<size_t>(i)] = join(site_pairs[static_cast<size_t>(i)]);
        if (channels[static_cast<size_t>(i)] == nullptr) ++failed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  rep.joins_s = SecondsSince(start);
  rep.joins_cpu_s = CpuSeconds() - cpu_start;
  if (failed > 0) Die(absl::StrCat(failed.load(), " of ", sites, " joins failed"));
  channels.clear();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return rep;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The floor of N sites joining over gRPC with mutual TLS (certificates + joins)"};
  int sites = 1000;
  int workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int reps = 3;
  app.add_option("--sites", sites, "Sites, each with its own certificate and channel")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--workers", workers, "Threads opening channels")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--reps", reps, "Repetitions (medians are reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // As fl's main: Debian's Abseil checks lock order on every lock gRPC takes.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  std::vector<double> certs, joins, cpu;
  for (int r = 0; r < reps; ++r) {
    const Rep rep = RunOnce(sites, workers);
    certs.push_back(rep.certs_s);
    joins.push_back(rep.joins_s);
    cpu.push_back(rep.joins_cpu_s);
    std::fprintf(stderr, "  rep %d: certificates %.3f s, joins %.3f s (%.3f CPU-s)\n", r + 1,
                 rep.certs_s, rep.joins_s, rep.joins_cpu_s);
  }
  const double c = Median(certs), j = Median(joins), u = Median(cpu);
  std::printf(
      "| sites | workers | certificates (s) | joins (s) | per join (ms) | process CPU in joins (s) "
      "|\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %d | %d | %.3f | %.3f | %.2f | %.3f |\n", sites, workers, c, j, 1000 * j / sites,
              u);
  std::printf("RESULT side=join_floor sites=%d workers=%d certs_s=%.3f joins_s=%.3f cpu_s=%.3f\n",
              sites, workers, c, j, u);
  return 0;
}
