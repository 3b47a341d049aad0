// Secure-aggregation rounds (SecAgg+): the checks at Create, setting up an attempt, closing each
// stage (dropping who did not answer), and handing the unmasked mean to the strategy through the
// plain rounds' commit path. The clients' side is in secagg_clients.cc.
#include "server/engine/secagg_round.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/common/crash_point.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

namespace {

// Public: derived from the run's seed, the round and the attempt (SplitMix64's finaliser over the
// three); the graph itself comes from a hash of it and of every site's fresh keys.
uint64_t GraphSeed(uint64_t seed, int32_t round, int32_t attempt) {
  uint64_t z = seed ^ (static_cast<uint64_t>(static_cast<uint32_t>(round)) << 32) ^
               static_cast<uint32_t>(attempt) ^ 0x5ec2a66e5eedULL;
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

const char* SecAggStageName(SecAggStage stage) {
  static constexpr const char* kNames[] = {"advertise keys", "share keys", "masked input",
                                           "consistency", "unmask"};
  return kNames[static_cast<int>(stage)];
}

Task::Kind SecAggTaskKind(SecAggStage stage) {
  static constexpr Task::Kind kKinds[] = {
      Task::Kind::kSecAggAdvertise, Task::Kind::kSecAggShare, Task::Kind::kSecAggMaskedInput,
      Task::Kind::kSecAggConsistency, Task::Kind::kSecAggUnmask};
  return kKinds[static_cast<int>(stage)];
}

RoundState::RoundState() = default;
RoundState::~RoundState() = default;

std::string SecAggRound::RecordJson(bool failed) const {
  return Record(failed, /*unmasking=*/false);
}

std::string SecAggRound::UnmaskingRecordJson() const {
  return Record(/*failed=*/false, /*unmasking=*/true);
}

std::string SecAggRound::Record(bool failed, bool unmasking) const {
  const SecAggRound& s = *this;
  const secagg::SecAggParams& p = s.params;
  nlohmann::json dropped = nlohmann::json::array();
  for (const auto& [id, d] : s.dropped) {
    dropped.push_back({{"client", s.client_of[id].substr(0, 16)},
                       {"secagg_id", id},
                       {"stage", SecAggStageName(d.stage)},
                       {"refused", d.refused()},
                       {"reason", d.reason}});
  }
  nlohmann::json j = {
      {"params",
       {{"n", p.num_clients},
        {"k", p.num_neighbors},
        {"t", p.threshold},
        {"c", p.clip_range},
        {"b", p.quantization_bits},
        {"m", p.modulus_bits},
        {"max_weight", p.max_weight},
        {"example_unit", s.example_unit},
        {"graph_seed", p.graph_seed},
        {"corrupt_fraction", p.corrupt_fraction},
        {"privacy_risk", s.risk.privacy},
        {"stall_risk", s.risk.stall},
        {"dp_noise_stddev", s.dp_noise_stddev},
        {"dp_min_survivors", s.dp_min_survivors}}},
      {"u1", s.u1},
      {"u2", s.u2},
      {"u3", s.u3},
      {"signed", s.signers},  // signed the survivor set (U4)
      {"u4", s.u4},           // unmask responders
      {"dropped", dropped},
      {"relay_bytes", s.relay_bytes},
      {"relay_sha256", s.relay_sha256},
      {"stage_ms", s.stage_closed_ms},
      {"last_input_ms", s.last_input_ms},
  };
  if (secagg::UsesDdg(p)) {
    j["params"]["ddg"] = {{"clip_norm", p.ddg.clip_norm},
                          {"granularity", p.ddg.granularity},
                          {"stddev", p.ddg.site_stddev},
                          {"beta", p.ddg.beta},
                          {"rotation_seed", p.ddg.rotation_seed},
                          {"padded_dimension", secagg::DdgPaddedDimension(s.dimension)}};
  }
  if (failed) j["failed_at"] = SecAggStageName(s.stage);
  if (s.sum_revealed) j["revealed"] = true;  // the server saw the sum: no other attempt may run
  if (unmasking) {
    j["unmasking"] = true;  // the masks are coming off (UnmaskingRecordJson)
    // Whose inputs the sum holds, so that a restart counts their exposure to the server.
    nlohmann::json summed = nlohmann::json::array();
    for (int id : s.survivors.survivors) summed.push_back(s.client_of[id]);
    j["summed"] = std::move(summed);
  }
  return j.dump();
}

absl::Status EngineImpl::CheckSecureAggregation() const {
  const SecureAggregationOptions& sa = options_.secure_aggregation;
  const PrivacyOptions& p = options_.privacy;
  if (options_.federated_standardization && sa.enabled) {
    return absl::InvalidArgumentError(
        "run.federated_standardization cannot run with secure aggregation: each site's feature "
        "sums would reach the server in the clear; standardise at the sites or turn one off");
  }
  if (p.distributed() && !sa.enabled) {
    return absl::InvalidArgumentError(
        "privacy.mode distributed needs secure aggregation (secure_aggregation.enabled); "
        "without it the server reads every update, so use central");
  }
  if (!sa.enabled) return absl::OkStatus();
  if (absl::Status s = sa.Validate(); !s.ok()) return s;
  if (p.enabled()) {
    return absl::InvalidArgumentError(
        "privacy.mode central needs the server to read updates; use distributed with secure "
        "aggregation");
  }
  if (options_.min_clients < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation needs min_clients >= 3 (with 2, each client could "
                     "subtract its own change from the sum), got ",
                     options_.min_clients));
  }
  if (strategy_->name() == "scaffold") {
    return absl::InvalidArgumentError(
        "secure aggregation cannot run strategy 'scaffold' (its control variates are summed "
        "unweighted beside the weighted model); use fedavg or fedprox");
  }
  if (absl::StartsWith(options_.stop_metric, "train_")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stop_metric '", options_.stop_metric,
        "' cannot be used with secure aggregation: the clients' training metrics are not sent in "
        "the clear"));
  }
  absl::StatusOr<secagg::SecAggParams> params = sa.ParamsFor(options_.min_clients, 0);
  if (!params.ok()) return params.status();
  return absl::OkStatus();
}

absl::Status EngineImpl::StartSecAggLocked(RoundState& round, int32_t online) {
  const SecureAggregationOptions& o = options_.secure_aggregation;
  auto input = std::make_unique<SecAggRound>(*strategy_, global_);
  round.secagg = input.get();
  round.input = std::move(input);
  SecAggRound& s = *round.secagg;
  const int32_t n = static_cast<int32_t>(round.sampled.size());
  s.client_of = round.sampled;  // sorted
  for (int32_t i = 0; i < n; ++i) s.id_of[round.sampled[i]] = i;
  s.example_unit = o.example_unit;
  s.dimension = static_cast<size_t>(global_->spec().NumFloats());
  absl::StatusOr<secagg::SecAggParams> params =
      o.ParamsFor(n, GraphSeed(options_.seed, round.round, round.attempt));
  if (!params.ok()) return params.status();
  s.params = *params;
  if (options_.privacy.distributed()) {
    const PrivacyOptions& p = options_.privacy;
    s.dp_min_survivors = DpMinSurvivors(n);
    absl::StatusOr<double> stddev = aggregation::dp::DistributedNoiseStddev(
        p.noise_multiplier, p.clip_norm, s.dp_min_survivors);
    if (!stddev.ok()) return stddev.status();
    s.dp_clip_norm = p.clip_norm;
    s.dp_noise_stddev = *stddev;
    if (p.discrete()) {
      absl::StatusOr<secagg::DdgEncoding> encoding = DdgEncodingFor(n);
      if (!encoding.ok()) return encoding.status();
      // Public: the rotation only flattens the coordinates so that few wrap the modulus.
      absl::StatusOr<uint64_t> rotation = SecureRandomUint64();
      if (!rotation.ok()) return rotation.status();
      encoding->rotation_seed = *rotation;
      s.params.ddg = *encoding;
    }
  }
  s.risk = secagg::SecAggRiskOf(s.params, o.max_dropout);
  secagg::SessionIdentity identity;
  identity.context =
      secagg::SessionContext(run_.run_id, round.round, round.task_of.at(round.sampled.front()));
  identity.verifier = hooks_.secagg_verifier;
  s.signatures_verified = identity.verifier != nullptr;
  absl::StatusOr<std::unique_ptr<secagg::ServerSession>> session = secagg::ServerSession::Create(
      s.params, static_cast<size_t>(global_->spec().NumFloats()), std::move(identity));
  if (!session.ok()) return session.status();
  s.session = *std::move(session);
  s.stage = SecAggStage::kAdvertise;
  s.stage_deadline = clock_->Now() + o.stage_timeout;
  round.deadline = s.stage_deadline;
  LogEvent(LogLevel::kInfo, "secagg_started",
           {{"round", absl::StrCat(round.round)},
            {"attempt", absl::StrCat(round.attempt)},
            {"n", absl::StrCat(n)},
            {"online", absl::StrCat(online)},
            {"k", absl::StrCat(s.params.num_neighbors)},
            {"t", absl::StrCat(s.params.threshold)},
            {"b", absl::StrCat(s.params.quantization_bits)},
            {"m", absl::StrCat(s.params.modulus_bits)},
            // Bell et al.'s two risks for this graph, with corrupt_fraction colluding and
            // max_dropout dropping: a site's input exposed by its colluding neighbours, and a
            // site left with fewer than t live neighbours (the round fails).
            {"corrupt_fraction", absl::StrCat(s.params.corrupt_fraction)},
            {"privacy_risk", absl::StrCat(s.risk.privacy)},
            {"stall_risk", absl::StrCat(s.risk.stall)}});
  return absl::OkStatus();
}

std::string SecAggRound::CloseStageInSession(const std::string& why, int32_t min_fit_clients,
                                             size_t sampled, bool poisoned) {
  SecAggRound& s = *this;
  std::string failure;
  // Enough of the sampled clients left to be worth going on (the library checks its own
  // thresholds at each close).
  auto enough = [&](int left, const std::string& what) {
    if (left < min_fit_clients) {
      failure =
          absl::StrCat("secure aggregation: only ", left, " of ", sampled, " sampled clients ",
                       what, " (", why, "); min_fit_clients is ", min_fit_clients);
    } else if (s.dp_min_survivors > 0 && left < s.dp_min_survivors) {
      failure = absl::StrCat("distributed DP: ", left, " survived, noise planned for ",
                             s.dp_min_survivors);
    }
  };
  switch (stage) {
    case SecAggStage::kAdvertise: {
      absl::StatusOr<secagg::KeyDirectory> dir = s.session->CloseAdvertiseKeys();
      if (!dir.ok()) {
        failure = std::string(dir.status().message());
        break;
      }
      s.u1 = static_cast<int>(dir->keys.size());
      enough(s.u1, "advertised keys");
      if (failure.empty()) CrashPoint("secagg_keys_closed");
      break;
    }
    case SecAggStage::kShare: {
      absl::StatusOr<std::map<int, secagg::ShareBundle>> bundles = s.session->CloseShareKeys();
      if (!bundles.ok()) {
        failure = std::string(bundles.status().message());
        break;
      }
      s.bundles = *std::move(bundles);
      s.u2 = static_cast<int>(s.bundles.size());
      Sha256 sha;
      for (const auto& [to, bundle] : s.bundles) {
        for (const auto& [from, sealed] : bundle.ciphertexts) {
          s.relay_bytes += static_cast<int64_t>(sealed.size());
          sha.Update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(sealed.data()),
                                                sealed.size()));
        }
      }
      s.relay_sha256 = sha.FinishHex();
      enough(s.u2, "shared keys");
      if (failure.empty()) CrashPoint("secagg_shares_closed");
      break;
    }
    case SecAggStage::kMaskedInput: {
      if (poisoned) {
        failure = "a masked input could not be folded whole (spill unreadable)";
        break;
      }
      absl::StatusOr<secagg::SurvivorList> list = s.session->CloseMaskedInput();
      if (!list.ok()) {
        failure = std::string(list.status().message());
        break;
      }
      s.survivors = *std::move(list);
      s.u3 = static_cast<int>(s.survivors.survivors.size());
      enough(s.u3, "delivered a masked input");
      break;
    }
    case SecAggStage::kConsistency: {
      s.signers = static_cast<int>(s.answered.size());
      absl::StatusOr<secagg::UnmaskRequest> request = s.session->CloseConsistency();
      if (!request.ok()) {
        failure = std::string(request.status().message());
        break;
      }
      s.unmask = *std::move(request);
      if (s.signatures_verified) {
        // The signatures were verified as they came, and a site checks no more than the
        // majority: only that many travel (each task O(n), not O(|U4|) entries of a kilobyte).
        const int needed =
            secagg::ConsistencyThreshold(s.params.num_clients, s.params.corrupt_fraction);
        auto& all = s.unmask.signatures;
        while (static_cast<int>(all.size()) > needed) all.erase(std::prev(all.end()));
      }
      // Sites that do not sign are still in the sum (and their noise with it): only the count
      // of the round's sites is checked here, not distributed DP's survivors.
      if (s.signers < min_fit_clients) {
        failure = absl::StrCat("secure aggregation: only ", s.signers, " of ", sampled,
                               " sampled clients signed the survivor set (", why,
                               "); min_fit_clients is ", min_fit_clients);
      }
      break;
    }
    case SecAggStage::kUnmask:
      s.u4 = static_cast<int>(s.answered.size());
      break;
  }
  return failure;
}

void EngineImpl::AdvanceSecAggLocked(absl::Time now) {
  while (current_ != nullptr && current_->secagg != nullptr) {
    RoundState& r = *current_;
    SecAggRound& s = *r.secagg;
    const bool masked = s.stage == SecAggStage::kMaskedInput;
    // The silent: sampled, not dropped, not answered, not seen for client_timeout.
    for (const std::string& id : r.sampled) {
      const int sid = s.id_of.at(id);
      if (s.dropped.count(sid) != 0 || s.answered.count(sid) != 0) continue;
      if (masked && r.uploads.count(id) != 0) continue;  // uploading or uploaded
      DropIfSilentLocked(id, now);
    }
    bool complete = true;
    {
      std::shared_lock<std::shared_mutex> gate(r.gate);
      for (const std::string& id : r.sampled) {
        const int sid = s.id_of.at(id);
        if (s.dropped.count(sid) != 0) continue;
        if (masked) {
          auto up = r.uploads.find(id);
          if (up != r.uploads.end() && up->second->phase != Phase::kStreaming) continue;
        } else if (s.answered.count(sid) != 0) {
          continue;
        }
        complete = false;
        break;
      }
    }
    if (!complete && now < s.stage_deadline) return;
    CloseSecAggStageLocked(complete ? "every client answered" : "deadline reached", now);
  }
}

void EngineImpl::CloseSecAggStageLocked(const std::string& why, absl::Time now) {
  RoundState& r = *current_;
  SecAggRound& s = *r.secagg;
  const SecAggStage stage = s.stage;
  const std::string name = SecAggStageName(stage);
  // Who did not answer by now is dropped at this stage.
  if (stage == SecAggStage::kMaskedInput) {
    CutOffUploadsLocked(r, absl::StrCat("stage ", name, " of round ", r.round, " closed (", why,
                                        ") before the update was complete"));
    for (const std::string& id : r.sampled) {
      if (s.dropped.count(s.id_of.at(id)) != 0) continue;
      auto up = r.uploads.find(id);
      if (up == r.uploads.end()) {
        s.Drop(id, aggregation::SiteFailure::Kind::kMissing,
               absl::StrCat("no masked input before the stage closed (", why, ")"));
      } else if (up->second->phase != Phase::kAccepted) {
        s.Drop(id, up->second->failure, up->second->reason);
      }
    }
  } else {
    for (const std::string& id : r.sampled) {
      const int sid = s.id_of.at(id);
      if (s.dropped.count(sid) != 0 || s.answered.count(sid) != 0) continue;
      s.Drop(id, aggregation::SiteFailure::Kind::kMissing,
             absl::StrCat("no answer before the stage closed (", why, ")"));
    }
  }
  const int answered =
      stage == SecAggStage::kMaskedInput ? -1 : static_cast<int>(s.answered.size());
  const std::string failure =
      s.CloseStageInSession(why, options_.min_fit_clients, r.sampled.size(), r.poisoned);
  s.stage_closed_ms.push_back(absl::ToInt64Milliseconds(now - r.started));
  LogEvent(failure.empty() ? LogLevel::kInfo : LogLevel::kWarn, "secagg_stage_closed",
           {{"round", absl::StrCat(r.round)},
            {"attempt", absl::StrCat(r.attempt)},
            {"stage", name},
            {"why", why},
            {"answered", absl::StrCat(answered >= 0 ? answered : s.u3)},
            {"dropped", absl::StrCat(s.dropped.size())},
            {"u1", absl::StrCat(s.u1)},
            {"u2", absl::StrCat(s.u2)},
            {"u3", absl::StrCat(s.u3)}});
  if (!failure.empty()) {
    FailSecAggRoundLocked(failure, now);
    return;
  }
  if (stage != SecAggStage::kUnmask) {
    s.stage = static_cast<SecAggStage>(static_cast<int>(stage) + 1);
    s.answered.clear();
    s.stage_deadline =
        now + (s.stage == SecAggStage::kMaskedInput ? options_.round_timeout
                                                    : options_.secure_aggregation.stage_timeout);
    r.deadline = s.stage_deadline;
    BumpLocked();
    return;
  }
  // Unmask: the masks are removed by the commit, without mu_ (SecAggRound::Finish).
  std::shared_ptr<RoundState> round = std::move(current_);
  current_ = nullptr;
  std::vector<ParticipationRecord> participations = SecAggParticipationsLocked(*round);
  // The sites whose input is not in the sum, for the strategy (RoundAggregator::Failed).
  std::vector<aggregation::SiteFailure> failures;
  for (const ParticipationRecord& p : participations) {
    if (p.status == ParticipationStatus::kAccepted) continue;
    auto d = s.dropped.find(s.id_of.at(p.client_id));
    failures.push_back(
        {.site = p.client_id,
         .kind = d != s.dropped.end() ? d->second.kind : aggregation::SiteFailure::Kind::kMissing,
         .reason = p.reason});
  }
  RoundSummary summary;
  summary.num_accepted = s.u3;
  ScheduleCommitLocked(PendingCommit{std::move(round), std::move(participations),
                                     std::move(summary), std::move(failures)});
}

absl::StatusOr<Model> SecAggRound::Finish(std::span<const aggregation::SiteFailure> failures,
                                          std::optional<Model>& state) {
  // Remove the masks, hand the mean change to the strategy as one update.
  CrashPoint("secagg_unmask");
  // Once the masks are off the server has seen the sum, even when the session's checks then
  // refuse it (a wrong share or input) or it runs out of memory decoding it: the attempt must
  // not be run again.
  absl::StatusOr<secagg::AggregateResult> result = absl::UnknownError("not unmasked");
  try {
    result = session->Finish();
  } catch (...) {
    sum_revealed = session->unmasked();
    throw;
  }
  sum_revealed = session->unmasked();
  if (!result.ok()) return result.status();
  const std::span<const float> g = global->data();
  if (result->mean.size() != g.size()) {
    return absl::InternalError(absl::StrCat("secure aggregation: the unmasked mean has ",
                                            result->mean.size(), " values, the model ", g.size()));
  }
  Model candidate(global->spec());
  std::span<float> c = candidate.data();
  for (size_t i = 0; i < c.size(); ++i) c[i] = g[i] + result->mean[i];
  std::unique_ptr<aggregation::RoundAggregator> agg = strategy->BeginRound(*global);
  for (const aggregation::SiteFailure& f : failures) agg->Failed(f);
  agg->Fold(0, c, 1.0);
  agg->Accept(1.0);
  CrashPoint("aggregate");
  absl::StatusOr<Model> next = agg->Finish();
  if (next.ok()) state = agg->TakeState();
  return next;
}

void EngineImpl::FailSecAggRoundLocked(const std::string& failure, absl::Time now) {
  std::shared_ptr<RoundState> round = std::move(current_);
  current_ = nullptr;
  CutOffUploadsLocked(*round, absl::StrCat("round failed: ", failure));
  std::vector<ParticipationRecord> participations = SecAggParticipationsLocked(*round);
  RoundSummary summary;
  summary.num_accepted = round->secagg->u3;
  EndAttemptLocked(std::move(round), std::move(participations), std::move(summary),
                   CommitInputs{absl::FailedPreconditionError(failure)}, now);
}

std::vector<ParticipationRecord> EngineImpl::SecAggParticipationsLocked(
    const RoundState& round) const {
  const SecAggRound& s = *round.secagg;
  std::vector<ParticipationRecord> out;
  for (const std::string& id : round.sampled) {
    auto up = round.uploads.find(id);
    if (up != round.uploads.end() && up->second->phase == Phase::kAccepted) {
      out.push_back(ParticipationFor(round, *up->second));  // in U3: its input is in the sum
      continue;
    }
    ParticipationRecord p;
    p.run_id = run_.run_id;
    p.round = round.round;
    p.attempt = round.attempt;
    p.client_id = id;
    p.task_id = round.task_of.at(id);
    p.metrics_json = "{}";
    if (up != round.uploads.end()) p.bytes_received = up->second->bytes_received;
    auto d = s.dropped.find(s.id_of.at(id));
    if (d != s.dropped.end()) {
      p.status =
          d->second.refused() ? ParticipationStatus::kRefused : ParticipationStatus::kDropped;
      p.reason = absl::StrCat("dropped at stage ", SecAggStageName(d->second.stage), ": ",
                              d->second.reason);
    } else {
      p.status = ParticipationStatus::kDropped;
      p.reason = absl::StrCat("the attempt failed at stage ", SecAggStageName(s.stage));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace fl::server::internal
