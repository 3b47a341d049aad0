#include "simulation/internal/site_executor.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/client/client.h"
#include "fl/common/chunking.h"
#include "fl/common/logging.h"

namespace fl::simulation {
namespace {

// Wraps a site's transport: calls that only read pass through at once; what the site
// sends is recorded, to be delivered by the driver at the site's simulated finish time.
class RecordingTransport final : public client::Transport {
 public:
  // `record_models`: keep the model each download brought and each float32 update, for an
  // attack to rewrite (Poison); otherwise neither outlives its call.
  RecordingTransport(std::shared_ptr<client::Transport> inner, bool record_models)
      : inner_(std::move(inner)), record_models_(record_models) {}

  absl::StatusOr<client::JoinAnswer> Join(const client::JoinRequestInfo& r) override {
    return inner_->Join(r);
  }
  absl::StatusOr<client::ClientTask> Poll(int64_t run_id, absl::Duration wait) override {
    return inner_->Poll(run_id, wait);
  }
  absl::StatusOr<std::shared_ptr<const Model>> Download(const client::ClientTask& task,
                                                        const ModelSpec& spec) override {
    absl::StatusOr<std::shared_ptr<const Model>> model = inner_->Download(task, spec);
    if (model.ok() && record_models_) downloaded_ = *model;
    return model;
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
    if (header.encoding == client::UpdateHeader::Encoding::kFloat32 && downloaded_ != nullptr &&
        header.payload_bytes == downloaded_->NumBytes()) {
      update_ = payload;
      update_global_ = downloaded_;
    }
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
  // Not passed on: the site's transport may outlive this client (kept open for its next tasks),
  // and a cancelled transport stays cancelled. The simulation never stops a client mid-task.
  void Cancel() override {}

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
    ForgetUpdate();
    return refused;
  }
  void Discard() {
    recorded_.clear();
    ForgetUpdate();
  }
  int64_t TakeBytesUp() { return std::exchange(bytes_up_, 0); }

  // The float32 model this site recorded to send since the last delivery (writable: an attack
  // rewrites it before it goes), and the global model it trained from; empty when there is none.
  std::span<float> RecordedModel() {
    if (update_ == nullptr) return {};
    return std::span<float>(reinterpret_cast<float*>(update_->data()),
                            update_->size() / sizeof(float));
  }
  std::span<const float> RecordedGlobal() const {
    return update_global_ != nullptr ? update_global_->data() : std::span<const float>();
  }
  void ForgetUpdate() {
    update_.reset();
    update_global_.reset();
  }

 private:
  std::shared_ptr<client::Transport> inner_;
  const bool record_models_;
  std::shared_ptr<const Model> downloaded_;  // the last model downloaded
  std::shared_ptr<std::vector<std::byte>> update_;
  std::shared_ptr<const Model> update_global_;
  std::vector<std::function<absl::Status()>> recorded_;
  int64_t bytes_up_ = 0;
};

struct ActiveSite {
  std::unique_ptr<client::Trainer> trainer;
  std::unique_ptr<client::Client> client;
  RecordingTransport* transport = nullptr;  // owned by client
};

class LocalSiteExecutor final : public SiteExecutor {
 public:
  LocalSiteExecutor(const LocalSiteOptions& options, TrainerFactory make_trainer,
                    TransportFactory make_transport)
      : options_(options),
        make_trainer_(std::move(make_trainer)),
        make_transport_(std::move(make_transport)) {}

  absl::Status Join(const std::vector<int32_t>& sites, const client::JoinRequestInfo& join,
                    const std::function<void(int32_t joined)>& on_joined) override {
    // On the pool: over gRPC each join is a handshake; the engine admits them in any order.
    const int32_t n = static_cast<int32_t>(sites.size());
    std::atomic<int32_t> next{0};
    std::atomic<int32_t> joined{0};
    std::mutex mu;
    absl::Status error;
    auto join_some = [&] {
      client::JoinRequestInfo mine = join;
      for (int32_t i = next++; i < n; i = next++) {
        const int32_t site = sites[static_cast<size_t>(i)];
        mine.client_name = absl::StrCat(options_.name_prefix, site);
        absl::StatusOr<std::shared_ptr<client::Transport>> transport = TransportOf(site);
        absl::Status s = transport.ok() ? (*transport)->Join(mine).status() : transport.status();
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) {
          if (error.ok()) error = s;
          next = n;
          return;
        }
        const int32_t done = ++joined;
        if (on_joined && (done % 10000 == 0 || done == n)) on_joined(done);
      }
    };
    RunOnPool(n, join_some);
    return error;
  }

  void Run(std::vector<SiteWork>& wave) override {
    for (const SiteWork& w : wave) active_.try_emplace(w.site);  // the workers only look up
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < wave.size(); i = next++) RunOne(wave[i]);
    };
    RunOnPool(static_cast<int32_t>(wave.size()), work);
  }

  int Deliver(int32_t site) override {
    auto it = active_.find(site);
    if (it == active_.end() || it->second.transport == nullptr) return 0;
    return it->second.transport->Deliver(absl::StrCat(options_.name_prefix, site));
  }

  void Discard(int32_t site) override {
    auto it = active_.find(site);
    if (it != active_.end() && it->second.transport != nullptr) it->second.transport->Discard();
  }

  absl::Status Poison(const std::vector<SiteWork>& wave, const PoisonFn& poison) override {
    std::vector<RoundUpdate> updates;
    for (const SiteWork& w : wave) {
      auto it = active_.find(w.site);
      if (it == active_.end() || it->second.transport == nullptr) continue;
      std::span<float> model = it->second.transport->RecordedModel();
      if (model.empty()) continue;
      updates.push_back(
          {.site = w.site, .model = model, .global = it->second.transport->RecordedGlobal()});
    }
    poison(updates);
    return absl::OkStatus();
  }

  void Release(int32_t site, bool keep_client) override {
    if (keep_client) return;
    auto it = active_.find(site);
    if (it == active_.end()) return;
    if (options_.persistent_trainers) {
      it->second.client.reset();
      it->second.transport = nullptr;
    } else {
      active_.erase(it);
    }
  }

 private:
  void RunOne(SiteWork& w) {
    ActiveSite& a = active_.at(w.site);
    if (a.trainer == nullptr) {
      absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = make_trainer_(w.site);
      if (!trainer.ok()) {
        w.error = trainer.status();
        return;
      }
      a.trainer = *std::move(trainer);
    }
    if (a.client == nullptr) {
      absl::StatusOr<std::shared_ptr<client::Transport>> inner = TransportOf(w.site);
      if (!inner.ok()) {
        w.error = inner.status();
        return;
      }
      auto transport =
          std::make_unique<RecordingTransport>(*std::move(inner), options_.record_models);
      a.transport = transport.get();
      client::ClientOptions client_options;
      client_options.name = absl::StrCat(options_.name_prefix, w.site);
      client::internal::SecAggIdentity identity;
      if (options_.identities != nullptr) {
        absl::StatusOr<client::internal::SecAggIdentity> made =
            options_.identities->For(w.site, client_options.name);
        if (!made.ok()) {
          w.error = made.status();
          return;
        }
        identity = *std::move(made);
      }
      absl::StatusOr<std::unique_ptr<client::Client>> c = client::internal::MakeClient(
          client_options, a.trainer.get(), std::move(transport), std::move(identity));
      if (!c.ok()) {
        w.error = c.status();
        return;
      }
      a.client = *std::move(c);
    }
    if (w.poll_run_id > 0) {
      absl::StatusOr<client::ClientTask> task =
          a.transport->Poll(w.poll_run_id, absl::ZeroDuration());
      if (!task.ok()) {
        w.error = task.status();
        return;
      }
      w.task = *std::move(task);
    }
    a.client->set_on_task([&w](const client::TaskReport& r) { w.num_examples = r.num_examples; });
    (void)client::internal::RunTask(*a.client, w.task);
    w.bytes_up = a.transport->TakeBytesUp();
  }

  // Site `site`'s transport: the one it keeps open (up to options_.open_transports sites keep
  // theirs, as a real site keeps its channel), or a new one. Any thread.
  absl::StatusOr<std::shared_ptr<client::Transport>> TransportOf(int32_t site) {
    if (options_.open_transports > 0) {
      std::lock_guard<std::mutex> lock(open_mu_);
      if (auto it = open_.find(site); it != open_.end()) return it->second;
    }
    absl::StatusOr<std::unique_ptr<client::Transport>> made = make_transport_(site);
    if (!made.ok()) return made.status();
    std::shared_ptr<client::Transport> transport = *std::move(made);
    if (options_.open_transports > 0) {
      std::lock_guard<std::mutex> lock(open_mu_);
      if (static_cast<int64_t>(open_.size()) < options_.open_transports) open_[site] = transport;
    }
    return transport;
  }

  // Runs `body` on min(workers, jobs) threads, this one among them.
  void RunOnPool(int32_t jobs, const std::function<void()>& body) const {
    std::vector<std::thread> pool;
    const int threads = std::min<int>(options_.workers, jobs);
    for (int t = 1; t < threads; ++t) pool.emplace_back(body);
    body();
    for (std::thread& t : pool) t.join();
  }

  const LocalSiteOptions options_;
  const TrainerFactory make_trainer_;
  const TransportFactory make_transport_;
  std::map<int32_t, ActiveSite> active_;  // sites with a trainer (and a client while working)
  std::mutex open_mu_;
  std::map<int32_t, std::shared_ptr<client::Transport>> open_;  // guarded by open_mu_
};

}  // namespace

std::unique_ptr<SiteExecutor> MakeLocalSiteExecutor(const LocalSiteOptions& options,
                                                    TrainerFactory make_trainer,
                                                    TransportFactory make_transport) {
  return std::make_unique<LocalSiteExecutor>(options, std::move(make_trainer),
                                             std::move(make_transport));
}

}  // namespace fl::simulation
