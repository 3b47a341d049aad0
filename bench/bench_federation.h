// Shared by the benchmarks that run the real server and SDK clients: a trainer that measures the
// framework, not training, and the server options of a mutual-TLS run on loopback.
#ifndef FL_BENCH_BENCH_FEDERATION_H_
#define FL_BENCH_BENCH_FEDERATION_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"

namespace fl::bench {

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

}  // namespace fl::bench

#endif  // FL_BENCH_BENCH_FEDERATION_H_
