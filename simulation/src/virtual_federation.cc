#include "simulation/internal/virtual_federation.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client_sdk/internal/transport.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "simulation/internal/inproc_transport.h"

namespace fl::simulation {
namespace {

// A uniform number in [0, 1) from a string and the seed: the draws of heterogeneity, fixed by
// the seed and independent of the order in which anything runs.
double UnitHash(uint64_t seed, const std::string& what) {
  const std::string digest = Sha256Hex(absl::StrCat(seed, "/", what));
  uint64_t x = 0;
  for (int i = 0; i < 13; ++i) {  // 52 bits of the hex digest
    const char c = digest[static_cast<size_t>(i)];
    x = (x << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return static_cast<double>(x) / static_cast<double>(uint64_t{1} << 52);
}

// Wraps the in-process transport: calls that only read pass through at once; what the site
// sends is recorded, to be delivered by the driver at the site's simulated finish time.
class RecordingTransport final : public client::Transport {
 public:
  explicit RecordingTransport(std::unique_ptr<client::Transport> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<client::JoinAnswer> Join(const client::JoinRequestInfo& r) override {
    return inner_->Join(r);
  }
  absl::StatusOr<client::ClientTask> Poll(int64_t run_id, absl::Duration wait) override {
    return inner_->Poll(run_id, wait);
  }
  absl::StatusOr<std::shared_ptr<const Model>> Download(const client::ClientTask& task,
                                                        const ModelSpec& spec) override {
    return inner_->Download(task, spec);
  }
  absl::Status SubmitUpdate(const client::UpdateHeader& header,
                            const client::ChunkSource& next_chunk) override {
    auto payload = std::make_shared<std::vector<std::byte>>();
    payload->reserve(static_cast<size_t>(header.payload_bytes));
    for (int64_t offset = 0; offset < header.payload_bytes;) {
      std::span<const std::byte> bytes = next_chunk(offset);
      payload->insert(payload->end(), bytes.begin(), bytes.end());
      offset += static_cast<int64_t>(bytes.size());
    }
    bytes_up_ += header.payload_bytes;
    recorded_.push_back([this, header, payload] {
      return inner_->SubmitUpdate(header, [&](int64_t offset) {
        const int64_t n = std::min<int64_t>(kMaxChunkBytes, header.payload_bytes - offset);
        return std::span<const std::byte>(payload->data() + offset, static_cast<size_t>(n));
      });
    });
    return absl::OkStatus();
  }
  absl::Status Decline(const client::ClientTask& task, const std::string& reason) override {
    recorded_.push_back([this, task, reason] { return inner_->Decline(task, reason); });
    return absl::OkStatus();
  }
  absl::Status SubmitEvaluation(const client::EvaluationReply& reply) override {
    recorded_.push_back([this, reply] { return inner_->SubmitEvaluation(reply); });
    return absl::OkStatus();
  }
  absl::Status SubmitSecAgg(const client::SecAggReply& reply) override {
    recorded_.push_back([this, reply] { return inner_->SubmitSecAgg(reply); });
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Heartbeat(const client::ClientTask& task, std::string* message) override {
    return inner_->Heartbeat(task, message);
  }
  bool wants_heartbeats() const override { return false; }
  bool WaitForServer(absl::Duration d) override { return inner_->WaitForServer(d); }
  void Cancel() override { inner_->Cancel(); }

  // Delivers what was recorded, in order; the engine's refusals are counted, not fatal (a late
  // update after a deadline is refused as it would be in production).
  int Deliver(const std::string& site) {
    int refused = 0;
    for (auto& send : recorded_) {
      absl::Status s = send();
      if (!s.ok()) {
        ++refused;
        LogEvent(LogLevel::kDebug, "virtual_site_refused",
                 {{"name", site}, {"error", s.ToString()}});
      }
    }
    recorded_.clear();
    return refused;
  }
  void Discard() { recorded_.clear(); }
  int64_t TakeBytesUp() { return std::exchange(bytes_up_, 0); }

 private:
  std::unique_ptr<client::Transport> inner_;
  std::vector<std::function<absl::Status()>> recorded_;
  int64_t bytes_up_ = 0;
};

struct ActiveSite {
  std::unique_ptr<client::Trainer> trainer;
  std::unique_ptr<client::Client> client;
  RecordingTransport* transport = nullptr;  // owned by client
};

struct Work {
  int32_t site = 0;
  client::ClientTask task;
  absl::Status error;  // a factory's failure
  int64_t num_examples = 0;
  absl::Time finish;
  bool dropout = false;
};

}  // namespace

std::string VirtualSiteId(const std::string& name) { return Sha256Hex(name); }

absl::StatusOr<VirtualFederationStats> RunVirtualFederation(
    server::RoundEngine& engine, SimulatedClock& clock, const VirtualFederationOptions& options,
    const ModelSpec& spec, const TrainerFactory& make_trainer,
    const std::function<void(int32_t joined)>& on_joined) {
  if (options.num_sites < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a virtual federation needs at least one site, got ", options.num_sites));
  }
  const Heterogeneity& het = options.heterogeneity;
  if (het.slow_factor < 1 || het.link_mbps <= 0 || het.slow_fraction < 0 || het.slow_fraction > 1 ||
      het.dropout_fraction < 0 || het.dropout_fraction >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heterogeneity: slow_factor must be >= 1 (got ", het.slow_factor, "), link_mbps > 0 (got ",
        het.link_mbps, "), slow_fraction in [0, 1] (got ", het.slow_fraction,
        "), dropout_fraction in [0, 1) (got ", het.dropout_fraction, ")"));
  }
  const int32_t n = options.num_sites;
  const int workers = options.workers > 0
                          ? options.workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  VirtualFederationStats stats;
  const absl::Time sim_start = clock.Now();

  // Idle state: a name and an id per site, and the ids sorted for lookups.
  std::vector<std::string> ids(static_cast<size_t>(n));
  std::vector<int32_t> by_id(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] =
        options.site_id ? options.site_id(i) : VirtualSiteId(absl::StrCat(options.name_prefix, i));
    by_id[static_cast<size_t>(i)] = i;
  }
  auto make_transport = [&](int32_t site) -> absl::StatusOr<std::unique_ptr<client::Transport>> {
    if (options.make_transport) return options.make_transport(site);
    return std::make_unique<InprocTransport>(&engine, ids[static_cast<size_t>(site)]);
  };
  const absl::Time join_start = absl::Now();
  {
    // Joins run on the pool (a handshake each over gRPC); the engine admits them in any order.
    client::JoinRequestInfo join;
    join.capabilities = {"cpu", "fp32", "fp16", "int8"};
    join.model_spec = spec;
    std::atomic<int32_t> next{0};
    std::atomic<int32_t> joined{0};
    std::mutex error_mu;
    absl::Status error;
    auto join_some = [&] {
      client::JoinRequestInfo mine = join;
      for (int32_t i = next++; i < n; i = next++) {
        mine.client_name = absl::StrCat(options.name_prefix, i);
        absl::StatusOr<std::unique_ptr<client::Transport>> transport = make_transport(i);
        absl::Status s = transport.ok() ? (*transport)->Join(mine).status() : transport.status();
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = s;
          next = n;
          return;
        }
        const int32_t done = ++joined;
        if (on_joined && (done % 10000 == 0 || done == n)) {
          std::lock_guard<std::mutex> lock(error_mu);
          on_joined(done);
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min(workers, n); ++t) pool.emplace_back(join_some);
    join_some();
    for (std::thread& t : pool) t.join();
    if (!error.ok()) return error;
  }
  stats.join_time = absl::Now() - join_start;
  std::sort(by_id.begin(), by_id.end(), [&](int32_t a, int32_t b) {
    return ids[static_cast<size_t>(a)] < ids[static_cast<size_t>(b)];
  });
  auto lookup = [&](const std::string& id) -> int32_t {
    auto it = std::lower_bound(
        by_id.begin(), by_id.end(), id,
        [&](int32_t a, const std::string& v) { return ids[static_cast<size_t>(a)] < v; });
    return it != by_id.end() && ids[static_cast<size_t>(*it)] == id ? *it : -1;
  };
  auto slow = [&](int32_t site) {
    return het.slow_fraction > 0 &&
           UnitHash(options.seed, absl::StrCat("slow/", site)) < het.slow_fraction;
  };

  std::map<int32_t, ActiveSite> active;  // sites with a trainer (and a client while working)
  std::vector<char> silent(static_cast<size_t>(n), 0);  // dropped out of the current attempt
  std::vector<std::string> silent_pending;  // PendingClients when the first site dropped out
  absl::Time last_keepalive = clock.Now();

  // Runs a wave's tasks on the pool (each site's real SDK loop, its messages recorded), then
  // gives each its simulated finish time and whether the site drops out of it.
  auto RunWave = [&](std::vector<Work>& wave) {
    for (const Work& w : wave) active.try_emplace(w.site);  // the workers only look sites up
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < wave.size(); i = next++) {
        Work& w = wave[i];
        ActiveSite& a = active.at(w.site);
        if (a.trainer == nullptr) {
          absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = make_trainer(w.site);
          if (!trainer.ok()) {
            w.error = trainer.status();
            continue;
          }
          a.trainer = *std::move(trainer);
        }
        if (a.client == nullptr) {
          absl::StatusOr<std::unique_ptr<client::Transport>> inner = make_transport(w.site);
          if (!inner.ok()) {
            w.error = inner.status();
            continue;
          }
          auto transport = std::make_unique<RecordingTransport>(*std::move(inner));
          a.transport = transport.get();
          client::ClientOptions client_options;
          client_options.name = absl::StrCat(options.name_prefix, w.site);
          absl::StatusOr<std::unique_ptr<client::Client>> c =
              client::internal::MakeClient(client_options, a.trainer.get(), std::move(transport));
          if (!c.ok()) {
            w.error = c.status();
            continue;
          }
          a.client = *std::move(c);
        }
        a.client->set_on_task(
            [&w](const client::TaskReport& r) { w.num_examples = r.num_examples; });
        (void)client::internal::RunTask(*a.client, w.task);
      }
    };
    std::vector<std::thread> pool;
    const int threads = std::min<int>(workers, static_cast<int>(wave.size()));
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    stats.tasks += static_cast<int64_t>(wave.size());
    const absl::Time now = clock.Now();
    for (Work& w : wave) {
      if (!w.error.ok()) continue;
      const double factor = slow(w.site) ? het.slow_factor : 1.0;
      const int64_t epochs = std::max<int32_t>(1, w.task.config.local_epochs);
      const bool moves_model = w.task.kind == client::ClientTask::Kind::kFit ||
                               w.task.kind == client::ClientTask::Kind::kSecAggMaskedInput ||
                               w.task.kind == client::ClientTask::Kind::kEvaluate;
      absl::Duration d = het.compute_per_example * static_cast<double>(w.num_examples * epochs);
      if (moves_model) {
        const int64_t bytes = w.task.model_bytes + active.at(w.site).transport->TakeBytesUp();
        d += absl::Seconds(static_cast<double>(bytes) * 8 / (het.link_mbps * 1e6));
      }
      w.finish = now + d * factor;
      w.dropout =
          (w.task.kind == client::ClientTask::Kind::kFit || client::IsSecAgg(w.task.kind)) &&
          het.dropout_fraction > 0 &&
          UnitHash(options.seed, absl::StrCat("drop/", w.task.task_id)) < het.dropout_fraction;
    }
  };

  // Deliveries not yet made, by simulated finish time (ties by site): sites still busy.
  std::vector<Work> in_flight;
  std::vector<char> busy(static_cast<size_t>(n), 0);
  auto earlier = [](const Work& a, const Work& b) {
    return std::tie(a.finish, a.site) < std::tie(b.finish, b.site);
  };

  // Moves the simulated clock towards `t`: busy sites heartbeat, idle ones stay online, the
  // engine ticks at least every heartbeat interval. Stops early, returning false, when the
  // engine's state changed (a round closed or started): its new tasks go out before any later
  // delivery, as they would reach sites that poll.
  auto advance_to = [&](absl::Time t) {
    const uint64_t version = engine.version();
    while (clock.Now() < t) {
      clock.AdvanceTo(std::min(t, clock.Now() + options.heartbeat_interval));
      for (const Work& w : in_flight) {
        if (!w.dropout) {
          engine.Heartbeat(ids[static_cast<size_t>(w.site)], w.task.round, w.task.task_id);
        }
      }
      if (clock.Now() - last_keepalive > options.client_timeout / 3) {
        for (int32_t i = 0; i < n; ++i) {
          if (!silent[static_cast<size_t>(i)]) {
            engine.Heartbeat(ids[static_cast<size_t>(i)], 0, "");
          }
        }
        last_keepalive = clock.Now();
      }
      engine.Tick();
      if (engine.version() != version) return false;
    }
    return true;
  };

  while (!engine.finished()) {
    engine.Tick();
    const std::vector<std::string> pending = engine.PendingClients();
    if (!silent_pending.empty() && pending != silent_pending) {
      std::fill(silent.begin(), silent.end(), 0);  // a new attempt or phase: everyone is back
      silent_pending.clear();
    }
    std::vector<Work> wave;
    for (const std::string& id : pending) {
      const int32_t site = lookup(id);
      if (site < 0 || silent[static_cast<size_t>(site)] || busy[static_cast<size_t>(site)]) {
        continue;
      }
      client::ClientTask task = ToClientTask(engine.Poll(id));
      if (task.kind == client::ClientTask::Kind::kWait ||
          task.kind == client::ClientTask::Kind::kDone) {
        continue;
      }
      Work w;
      w.site = site;
      w.task = std::move(task);
      wave.push_back(std::move(w));
    }
    if (!wave.empty()) {
      RunWave(wave);
      for (Work& w : wave) {
        if (!w.error.ok()) return w.error;
        busy[static_cast<size_t>(w.site)] = 1;
        in_flight.push_back(std::move(w));
      }
      std::sort(in_flight.begin(), in_flight.end(), earlier);
      continue;  // the wave's sites are busy now; poll again for what the engine has left
    }
    if (in_flight.empty()) {
      if (engine.finished()) break;
      // Nobody can act now: let simulated time pass until the engine moves (a deadline, a
      // client_timeout, the wait for min_clients).
      advance_to(clock.Now() + options.heartbeat_interval);
      continue;
    }
    if (!advance_to(in_flight.front().finish)) continue;
    Work w = std::move(in_flight.front());
    in_flight.erase(in_flight.begin());
    busy[static_cast<size_t>(w.site)] = 0;
    ActiveSite& a = active.at(w.site);
    if (w.dropout) {
      a.transport->Discard();
      silent[static_cast<size_t>(w.site)] = 1;
      if (silent_pending.empty()) silent_pending = pending;
      ++stats.dropouts;
    } else {
      stats.refused += a.transport->Deliver(absl::StrCat(options.name_prefix, w.site));
    }
    // A site keeps its client only inside a secure-aggregation round (its session), and its
    // trainer only when asked to (SCAFFOLD).
    const bool in_secagg = client::IsSecAgg(w.task.kind) &&
                           w.task.kind != client::ClientTask::Kind::kSecAggUnmask && !w.dropout;
    if (!in_secagg) {
      if (options.persistent_trainers) {
        a.client.reset();
        a.transport = nullptr;
      } else {
        active.erase(w.site);
      }
    }
  }
  stats.simulated_time = clock.Now() - sim_start;
  return stats;
}

}  // namespace fl::simulation
