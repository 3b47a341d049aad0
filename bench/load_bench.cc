// Thousands of sites on one server: N SDK clients over mutual TLS, spread over P client processes,
// long-poll and heartbeat through R rounds with S sampled per round, while M more (in a process of
// their own) misbehave: a third stall their upload halfway, a third join in a loop, a third hold
// twelve silent upload streams at a time (past their quota), renewed every 5 s. The server is the
// real one (fl::server::Server, in a process of its own with a sampler of its /proc/self/status).
//
//   load_bench [--clients 5000] [--processes 4] [--sampled 200] [--rounds 5] [--misbehaving 100]
//              [--idle-timeout-s 10] [--round-timeout-s 120] [--pickup-timeout-s 10]
//              [--work-dir /tmp/load_bench]
//
// Prints one table: rounds committed and their durations (median, max), the server's threads
// (before any client, and the most seen), its peak resident memory, the good clients that
// failed, and what the misbehaving ones got (cuts and refusals counted from the audit log).
// Exits 1 when a round did not commit, a good client failed, or no misbehaviour was refused.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_federation.h"
#include "fl/client/client.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/v1/federation.grpc.pb.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"

namespace {

using fl::bench::Check;
using fl::bench::Die;

struct Args {
  int clients = 5000;
  int processes = 4;
  int sampled = 200;
  int rounds = 5;
  int misbehaving = 100;
  int idle_timeout_s = 10;
  int round_timeout_s = 120;
  int pickup_timeout_s = 10;
  std::string work_dir = "/tmp/load_bench";
};

// /proc/self/status's thread count.
int64_t ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = "Threads:";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::atoll(line.c_str() + prefix.size());
  }
  return -1;
}

fl::ModelSpec BenchSpec() { return fl::ModelSpec({{"w", {64, 64}}}); }

// Good clients [first, first + count): SDK clients on a thread each, to DONE.
[[noreturn]] void GoodClients(const fl::ProvisionedFiles& pki, int first, int count, int port) {
  fl::SetLogLevel(fl::LogLevel::kError);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = first; i < first + count; ++i) {
    threads.emplace_back([&, i] {
      fl::client::ClientOptions o =
          fl::bench::TlsClientOptions(pki, i, absl::StrCat("127.0.0.1:", port));
      o.reconnect_timeout = absl::Minutes(10);
      fl::bench::PerturbTrainer trainer(BenchSpec(), i, 100);
      absl::StatusOr<std::unique_ptr<fl::client::Client>> c =
          fl::client::Client::Create(o, &trainer);
      absl::Status done = c.ok() ? (*c)->Run() : c.status();
      if (!done.ok()) {
        if (failed.fetch_add(1) < 5)
          std::fprintf(stderr, "client %d: %s\n", i, done.ToString().c_str());
      }
    });
    // TLS handshakes in a burst cost the server; a steady stream of joins is the real case.
    if ((i - first) % 50 == 49) absl::SleepFor(absl::Milliseconds(20));
  }
  for (std::thread& t : threads) t.join();
  _exit(failed.load() == 0 ? 0 : 1);
}

std::unique_ptr<fl::v1::Federation::Stub> RawStub(const fl::ProvisionedFiles& pki, int i,
                                                  int port) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = *fl::ReadFile(pki.ca_cert);
  ssl.pem_cert_chain = *fl::ReadFile(pki.client_certs[i]);
  ssl.pem_private_key = *fl::ReadFile(pki.client_keys[i]);
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  // One connection per stub: misbehaving sites do not share the good ones' connections.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return fl::v1::Federation::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl), args));
}

// Misbehaving clients [first, first + count), each in one of three ways, until `stop` says so.
[[noreturn]] void BadClients(const fl::ProvisionedFiles& pki, int first, int count, int port,
                             int stop_fd) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = first; i < first + count; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<fl::v1::Federation::Stub> stub = RawStub(pki, i, port);
      int64_t run_id = 0;
      while (!stop && run_id == 0) {
        grpc::ClientContext ctx;
        fl::v1::JoinRequest req;
        req.set_client_name(absl::StrCat("bad-", i));
        fl::v1::JoinReply reply;
        if (stub->Join(&ctx, req, &reply).ok()) run_id = reply.run_id();
        if (run_id == 0) absl::SleepFor(absl::Milliseconds(200));
      }
      const int kind = (i - first) % 3;
      if (kind == 0) {
        // Stalls: takes each fit task, sends the metadata and half the update, then nothing.
        std::vector<std::unique_ptr<grpc::ClientContext>> held;
        std::vector<std::unique_ptr<grpc::ClientWriter<fl::v1::UpdatePart>>> writers;
        std::vector<std::unique_ptr<fl::v1::SubmitReply>> replies;
        int32_t last_round = 0;
        while (!stop) {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          fl::v1::PollRequest req;
          req.set_run_id(run_id);
          req.set_wait_ms(5000);
          fl::v1::Task task;
          if (!stub->PollTask(&ctx, req, &task).ok()) {
            absl::SleepFor(absl::Milliseconds(200));
            continue;
          }
          if (task.kind() == fl::v1::Task::DONE) break;
          if (task.kind() != fl::v1::Task::FIT || task.round() == last_round) continue;
          last_round = task.round();
          held.push_back(std::make_unique<grpc::ClientContext>());
          replies.push_back(std::make_unique<fl::v1::SubmitReply>());
          writers.push_back(stub->SubmitUpdate(held.back().get(), replies.back().get()));
          fl::v1::UpdatePart part;
          fl::v1::UpdateMetadata* m = part.mutable_metadata();
          m->set_run_id(task.run_id());
          m->set_round(task.round());
          m->set_task_id(task.task_id());
          m->set_num_examples(100);
          m->set_encoding(fl::v1::UpdateMetadata::FLOAT32);
          m->set_payload_bytes(64 * 64 * 4);
          writers.back()->Write(part);
          part.Clear();
          part.mutable_chunk()->set_offset(0);
          part.mutable_chunk()->set_data(std::string(64 * 64 * 2, '\0'));
          writers.back()->Write(part);
        }
        for (auto& c : held) c->TryCancel();
      } else if (kind == 1) {
        // Joins in a loop, as fast as the server answers.
        while (!stop) {
          grpc::ClientContext ctx;
          fl::v1::JoinRequest req;
          req.set_client_name(absl::StrCat("bad-", i));
          fl::v1::JoinReply reply;
          (void)stub->Join(&ctx, req, &reply);
        }
      } else {
        // Holds twelve silent upload streams (past its quota), renewed every 5 s.
        while (!stop) {
          grpc::CompletionQueue cq;
          std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
          std::vector<std::unique_ptr<grpc::ClientAsyncWriter<fl::v1::UpdatePart>>> writers;
          fl::v1::SubmitReply reply;
          for (int s = 0; s < 12; ++s) {
            ctxs.push_back(std::make_unique<grpc::ClientContext>());
            ctxs.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
            writers.push_back(stub->AsyncSubmitUpdate(ctxs.back().get(), &reply, &cq, nullptr));
          }
          absl::SleepFor(absl::Seconds(5));
          for (auto& c : ctxs) c->TryCancel();
          cq.Shutdown();
          void* tag;
          bool ok;
          while (cq.Next(&tag, &ok)) {
          }
        }
      }
    });
  }
  char byte;
  (void)read(stop_fd, &byte, 1);  // the server process says when the run is over
  stop = true;
  for (std::thread& t : threads) t.join();
  _exit(0);
}

struct Figures {
  int rounds_committed = 0;
  double round_median_s = 0;
  double round_max_s = 0;
  double wall_s = 0;
  int64_t threads_idle = 0;
  int64_t threads_max = 0;
  double peak_mib = 0;
  int failed_processes = 0;
  int cuts = 0;
  int quota_refusals = 0;
};

[[noreturn]] void ServerProcess(const Args& a, const fl::ProvisionedFiles& pki, int result_fd) {
  const int good = a.clients - a.misbehaving;
  // Clients first, before any gRPC object or thread of this process.
  std::vector<int> port_fds;
  std::vector<pid_t> pids;
  const int per = (good + a.processes - 1) / a.processes;
  for (int p = 0; p < a.processes; ++p) {
    const int first = p * per;
    const int count = std::min(per, good - first);
    if (count <= 0) break;
    const fl::bench::Child c = fl::bench::ForkWithPipe(true, [&](int fd) {
      close(result_fd);
      for (int other : port_fds) close(other);
      int port = 0;
      if (read(fd, &port, sizeof(port)) != sizeof(port)) _exit(3);
      GoodClients(pki, first, count, port);
    });
    port_fds.push_back(c.parent_fd);
    pids.push_back(c.pid);
  }
  int stop_pipe[2] = {-1, -1};
  pid_t bad_pid = -1;
  int bad_port_fd = -1;
  if (a.misbehaving > 0) {
    if (pipe(stop_pipe) != 0) Die("pipe");
    const fl::bench::Child c = fl::bench::ForkWithPipe(true, [&](int fd) {
      close(result_fd);
      close(stop_pipe[1]);
      for (int other : port_fds) close(other);
      int port = 0;
      if (read(fd, &port, sizeof(port)) != sizeof(port)) _exit(3);
      BadClients(pki, good, a.misbehaving, port, stop_pipe[0]);
    });
    close(stop_pipe[0]);
    bad_port_fd = c.parent_fd;
    bad_pid = c.pid;
  }

  fl::SetLogLevel(fl::LogLevel::kWarn);
  fl::server::ServerOptions so = fl::bench::TlsServerOptions(pki, a.work_dir + "/server");
  so.engine.num_rounds = a.rounds;
  so.engine.min_clients = good;
  so.engine.min_fit_clients = std::max(1, a.sampled * 9 / 10);
  so.engine.sample_fraction = static_cast<double>(a.sampled) / a.clients;
  so.engine.round_timeout = absl::Seconds(a.round_timeout_s);
  so.engine.wait_timeout = absl::Minutes(20);
  // A sampled site that never asks for its task (the joiners, the stream holders) is dropped
  // after this; the ones that stall their upload are cut at the idle time.
  so.engine.task_pickup_timeout = absl::Seconds(a.pickup_timeout_s);
  so.client_limits.stream_idle_timeout = absl::Seconds(a.idle_timeout_s);
  absl::StatusOr<std::unique_ptr<fl::server::Server>> server =
      fl::server::Server::Start(so, fl::Model(BenchSpec()));
  Check(server.status(), "starting the server");
  Figures f;
  f.threads_idle = ThreadCount();
  std::atomic<bool> sampling{true};
  std::atomic<int64_t> threads_max{f.threads_idle};
  std::thread sampler([&] {
    while (sampling) {
      threads_max = std::max(threads_max.load(), ThreadCount());
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  const absl::Time t0 = absl::Now();
  fl::bench::HandOutPort(port_fds, (*server)->port());
  if (bad_port_fd >= 0) {
    std::vector<int> fds{bad_port_fd};
    fl::bench::HandOutPort(fds, (*server)->port());
  }
  (*server)->WaitUntilFinished(absl::Seconds(3));
  f.wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
  f.failed_processes = fl::bench::ReapClients(pids, "good clients");
  if (stop_pipe[1] >= 0) close(stop_pipe[1]);
  if (bad_pid > 0) fl::bench::ReapClients({bad_pid}, "misbehaving clients");
  sampling = false;
  sampler.join();
  f.threads_max = threads_max;
  f.peak_mib = fl::bench::ProcStatusMiB("VmHWM");
  fl::server::Store& store = (*server)->store();
  std::vector<double> durations;
  if (auto rounds = store.Rounds(1); rounds.ok()) {
    for (const fl::server::RoundRecord& r : *rounds) {
      if (r.status != fl::server::RoundStatus::kCommitted) continue;
      ++f.rounds_committed;
      durations.push_back((r.ended_at_ms - r.started_at_ms) / 1000.0);
    }
  }
  if (!durations.empty()) {
    std::sort(durations.begin(), durations.end());
    f.round_median_s = durations[durations.size() / 2];
    f.round_max_s = durations.back();
  }
  if (auto audit = store.AuditLog(1000000); audit.ok()) {
    for (const fl::server::AuditRecord& r : *audit) {
      if (r.detail.find("the server cut this upload") != std::string::npos) ++f.cuts;
      if (r.detail.find("limits.max_") != std::string::npos) ++f.quota_refusals;
    }
  }
  (*server)->Shutdown();
  if (write(result_fd, &f, sizeof(f)) != sizeof(f)) _exit(2);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Thousands of clients, some misbehaving, on one server"};
  app.add_option("--clients", a.clients, "Clients in all (good and misbehaving)");
  app.add_option("--processes", a.processes, "Processes the good clients run in");
  app.add_option("--sampled", a.sampled, "Clients sampled per round");
  app.add_option("--rounds", a.rounds, "Rounds");
  app.add_option("--misbehaving", a.misbehaving, "Misbehaving clients among --clients");
  app.add_option("--idle-timeout-s", a.idle_timeout_s, "The server's limits.stream_idle_timeout_s");
  app.add_option("--round-timeout-s", a.round_timeout_s, "The server's round deadline");
  app.add_option("--pickup-timeout-s", a.pickup_timeout_s, "The server's task_pickup_timeout_s");
  app.add_option("--work-dir", a.work_dir, "Certificates and the server's data (emptied first)");
  CLI11_PARSE(app, argc, argv);
  if (a.misbehaving >= a.clients || a.sampled > a.clients - a.misbehaving) {
    Die("--sampled and --misbehaving must leave room for the good clients");
  }
  std::filesystem::remove_all(a.work_dir);
  std::filesystem::create_directories(a.work_dir);
  fl::ProvisionOptions po;
  po.out_dir = a.work_dir + "/certs";
  po.federation_name = "load";
  for (int i = 0; i < a.clients; ++i) po.client_names.push_back(absl::StrCat("site-", i));
  const absl::Time t_pki = absl::Now();
  absl::StatusOr<fl::ProvisionedFiles> pki = fl::ProvisionFederation(po);
  Check(pki.status(), "provisioning");
  std::fprintf(stderr, "load_bench: %d certificates in %.1f s\n", a.clients,
               absl::ToDoubleSeconds(absl::Now() - t_pki));

  const fl::bench::Child server =
      fl::bench::ForkWithPipe(false, [&](int fd) { ServerProcess(a, *pki, fd); });
  Figures f;
  const bool got = read(server.parent_fd, &f, sizeof(f)) == sizeof(f);
  int status = 0;
  waitpid(server.pid, &status, 0);
  if (!got) Die("the server process reported nothing");
  std::printf(
      "load_bench: %d clients (%d misbehaving) in %d+1 processes, %d sampled per round, "
      "%d rounds, idle cut at %d s\n",
      a.clients, a.misbehaving, a.processes, a.sampled, a.rounds, a.idle_timeout_s);
  std::printf(
      "| rounds committed | round median | round max | wall | server threads idle / max "
      "| server peak RSS | failed good processes | uploads cut | quota refusals |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %d of %d | %.2f s | %.2f s | %.1f s | %lld / %lld | %.0f MiB | %d | %d | %d |\n",
              f.rounds_committed, a.rounds, f.round_median_s, f.round_max_s, f.wall_s,
              static_cast<long long>(f.threads_idle), static_cast<long long>(f.threads_max),
              f.peak_mib, f.failed_processes, f.cuts, f.quota_refusals);
  const bool ok = f.rounds_committed == a.rounds && f.failed_processes == 0 &&
                  (a.misbehaving < 3 || f.quota_refusals + f.cuts > 0);
  return ok ? 0 : 1;
}
