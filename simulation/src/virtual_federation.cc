#include "simulation/internal/virtual_federation.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client_sdk/internal/transport.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "simulation/internal/inproc_transport.h"
#include "simulation/internal/site_executor.h"

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

// The round attempt a task belongs to, the same over every transport: its id without the client
// part ("r3.a0" of "r3.a0.<client id>").
std::string AttemptOf(const client::ClientTask& task) {
  const size_t dot = task.task_id.rfind('.');
  return dot == std::string::npos ? task.task_id : task.task_id.substr(0, dot);
}

}  // namespace

std::string VirtualSiteId(const std::string& name) { return Sha256Hex(name); }

absl::StatusOr<VirtualFederationStats> RunVirtualFederation(
    server::RoundEngine& engine, SimulatedClock& clock, const VirtualFederationOptions& options,
    const ModelSpec& spec, const TrainerFactory& make_trainer,
    const std::function<void(int32_t joined)>& on_joined) {
  LocalSiteOptions local;
  local.workers = options.workers > 0
                      ? options.workers
                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  local.name_prefix = options.name_prefix;
  local.persistent_trainers = options.persistent_trainers;
  local.open_transports = options.open_transports;
  local.record_models = options.attack.poisons_updates();
  local.identities = options.identities;
  TransportFactory make_transport = options.make_transport;
  if (!make_transport) {
    make_transport = [&engine, &options](int32_t site) {
      return absl::StatusOr<std::unique_ptr<client::Transport>>(std::make_unique<InprocTransport>(
          &engine, options.site_id ? options.site_id(site)
                                   : VirtualSiteId(absl::StrCat(options.name_prefix, site))));
    };
  }
  std::unique_ptr<SiteExecutor> executor =
      MakeLocalSiteExecutor(local, make_trainer, std::move(make_transport));
  return DriveVirtualSites(engine, clock, options, spec, *executor, on_joined);
}

absl::StatusOr<VirtualFederationStats> DriveVirtualSites(
    server::RoundEngine& engine, SimulatedClock& clock, const VirtualFederationOptions& options,
    const ModelSpec& spec, SiteExecutor& executor,
    const std::function<void(int32_t joined)>& on_joined) {
  if (options.num_sites < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a virtual federation needs at least one site, got ", options.num_sites));
  }
  const Heterogeneity& het = options.heterogeneity;
  if (het.slow_factor < 1 || het.link_mbps <= 0 || het.slow_fraction < 0 || het.slow_fraction > 1 ||
      het.dropout_fraction < 0 || het.dropout_fraction >= 1 || !(het.availability > 0) ||
      het.availability > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("heterogeneity: slow_factor must be >= 1 (got ", het.slow_factor,
                     "), link_mbps > 0 (got ", het.link_mbps, "), slow_fraction in [0, 1] (got ",
                     het.slow_fraction, "), dropout_fraction in [0, 1) (got ", het.dropout_fraction,
                     "), availability in (0, 1] (got ", het.availability, ")"));
  }
  if (absl::Status s = options.attack.Validate(); !s.ok()) return s;
  const int32_t n = options.num_sites;
  const std::vector<bool> attacking =
      AttackingSites(n, options.attack.enabled() ? options.attack.fraction : 0, options.seed);
  if (options.attack.poisons_updates()) {
    if (absl::Status s = executor.Poison({}, [](std::vector<RoundUpdate>&) {}); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attack '", options.attack.kind, "' cannot be simulated: ", s.message()));
    }
  }
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
  const absl::Time join_start = absl::Now();
  {
    client::JoinRequestInfo join;
    join.capabilities = {"cpu", "fp32", "fp16", "int8"};
    join.model_spec = spec;
    if (absl::Status s = executor.Join(by_id, join, on_joined); !s.ok()) return s;
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
  // Whether a site is there in the round the engine runs or is about to run.
  auto available = [&](int32_t site) {
    return het.availability >= 1 ||
           UnitHash(options.seed, absl::StrCat("up/", site, "/", engine.committed_round() + 1)) <
               het.availability;
  };
  auto slow = [&](int32_t site) {
    return het.slow_fraction > 0 &&
           UnitHash(options.seed, absl::StrCat("slow/", site)) < het.slow_fraction;
  };

  std::vector<char> silent(static_cast<size_t>(n), 0);  // dropped out of the current attempt
  std::vector<std::string> silent_pending;  // PendingClients when the first site dropped out
  absl::Time last_keepalive = clock.Now();

  // Runs a wave's tasks (each site's real SDK loop, its messages recorded), then gives each its
  // simulated finish time and whether the site drops out of it.
  auto RunWave = [&](std::vector<SiteWork>& wave) {
    executor.Run(wave);
    stats.tasks += static_cast<int64_t>(wave.size());
    if (options.attack.poisons_updates()) {
      // The attackers rewrite what they trained before it reaches the engine.
      const uint64_t round_seed =
          options.seed * 1000003ull + static_cast<uint64_t>(engine.committed_round() + 1);
      int64_t expected = 0;  // attackers that trained in this wave
      for (const SiteWork& w : wave) {
        if (w.error.ok() && w.task.kind == client::ClientTask::Kind::kFit &&
            attacking[static_cast<size_t>(w.site)]) {
          ++expected;
        }
      }
      int64_t poisoned = 0;
      (void)executor.Poison(wave, [&](std::vector<RoundUpdate>& updates) {
        for (RoundUpdate& u : updates) {
          u.attacking = attacking[static_cast<size_t>(u.site)];
          poisoned += u.attacking ? 1 : 0;
        }
        if (!PoisonUpdates(options.attack, n, round_seed, updates)) poisoned = 0;
      });
      stats.poisoned += poisoned;
      if (poisoned < expected) {
        // An attacker whose update could not be rewritten (it declined, or ALIE had no others
        // in its wave to hide among): say so rather than report an attack that did not happen.
        LogEvent(LogLevel::kWarn, "attack_skipped",
                 {{"attack", options.attack.kind},
                  {"round", absl::StrCat(engine.committed_round() + 1)},
                  {"attackers", absl::StrCat(expected)},
                  {"poisoned", absl::StrCat(poisoned)}});
      }
    }
    const absl::Time now = clock.Now();
    for (SiteWork& w : wave) {
      if (!w.error.ok()) continue;
      const double factor = slow(w.site) ? het.slow_factor : 1.0;
      const int64_t epochs = std::max<int32_t>(1, w.task.config.local_epochs);
      const bool moves_model = w.task.kind == client::ClientTask::Kind::kFit ||
                               w.task.kind == client::ClientTask::Kind::kSecAggMaskedInput ||
                               w.task.kind == client::ClientTask::Kind::kEvaluate;
      absl::Duration d = het.compute_per_example * static_cast<double>(w.num_examples * epochs);
      if (moves_model) {
        const int64_t bytes = w.task.model_bytes + w.bytes_up;
        d += absl::Seconds(static_cast<double>(bytes) * 8 / (het.link_mbps * 1e6));
      }
      w.finish = now + d * factor;
      w.dropout =
          (w.task.kind == client::ClientTask::Kind::kFit || client::IsSecAgg(w.task.kind)) &&
          het.dropout_fraction > 0 &&
          UnitHash(options.seed, absl::StrCat("drop/", w.site, "/", AttemptOf(w.task))) <
              het.dropout_fraction;
    }
  };

  // Deliveries not yet made, by simulated finish time (ties by site): sites still busy.
  std::vector<SiteWork> in_flight;
  std::vector<char> busy(static_cast<size_t>(n), 0);
  auto earlier = [](const SiteWork& a, const SiteWork& b) {
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
      for (const SiteWork& w : in_flight) {
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
    std::vector<SiteWork> wave;
    for (const std::string& id : pending) {
      const int32_t site = lookup(id);
      if (site < 0 || silent[static_cast<size_t>(site)] || busy[static_cast<size_t>(site)]) {
        continue;
      }
      if (!available(site)) {  // not there this round: silent, as a device that is off
        silent[static_cast<size_t>(site)] = 1;
        if (silent_pending.empty()) silent_pending = pending;
        ++stats.unavailable;
        continue;
      }
      client::ClientTask task = ToClientTask(engine.Poll(id));
      if (task.kind == client::ClientTask::Kind::kWait ||
          task.kind == client::ClientTask::Kind::kDone) {
        continue;
      }
      SiteWork w;
      w.site = site;
      w.task = std::move(task);
      wave.push_back(std::move(w));
    }
    if (!wave.empty()) {
      RunWave(wave);
      for (SiteWork& w : wave) {
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
    SiteWork w = std::move(in_flight.front());
    in_flight.erase(in_flight.begin());
    busy[static_cast<size_t>(w.site)] = 0;
    if (w.dropout) {
      executor.Discard(w.site);
      silent[static_cast<size_t>(w.site)] = 1;
      if (silent_pending.empty()) silent_pending = pending;
      ++stats.dropouts;
    } else {
      stats.refused += executor.Deliver(w.site);
    }
    // A site keeps its client only inside a secure-aggregation round (its session).
    executor.Release(w.site, client::IsSecAgg(w.task.kind) &&
                                 w.task.kind != client::ClientTask::Kind::kSecAggUnmask &&
                                 !w.dropout);
  }
  stats.simulated_time = clock.Now() - sim_start;
  return stats;
}

}  // namespace fl::simulation
