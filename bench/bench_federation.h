// Shared by the benchmarks that run the real server and SDK clients: a trainer that measures the
// framework, not training, the server options of a mutual-TLS run on loopback, and the small
// helpers of a benchmark's main (fail loudly, read /proc/self/status).
#ifndef FL_BENCH_BENCH_FEDERATION_H_
#define FL_BENCH_BENCH_FEDERATION_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"

namespace fl::bench {

// A benchmark cannot go on: prints `what` and exits 1.
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}
// The value, or Die naming `what` and the status.
template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
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
