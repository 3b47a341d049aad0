// The distributed discrete Gaussian against the continuous Gaussian that distributed DP used
// before (each site clips its change to L2 norm C, adds N(0, sigma^2) and quantizes it): what a
// site's encoding costs, what the server's decoding costs, how far the decoded mean is from the
// true mean of the clipped changes, and the epsilons each is accounted for.
// Workload: n sites, d parameters, z and C as given, sigma = z C / sqrt(n) per site, 32-bit
// modulus; each site's change is N(0, 1) per coordinate (so clipped), the sum taken modulo 2^32
// as secure aggregation reveals it. Encodings of both kinds alternate over the repeats; medians.
//   ddg_bench [--clients 100] [--params 1000000] [--repeats 3] [--noise-multiplier 1]
//             [--clip-norm 1]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_check.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/quantization.h"

namespace {

using Clock = std::chrono::steady_clock;
using fl::bench::Check;
using fl::bench::Median;
namespace dp = fl::aggregation::dp;
namespace secagg = fl::secagg;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Result {
  std::vector<double> encode_s;  // one site's encoding, each repeat (the median site's)
  std::vector<double> decode_s;
  std::vector<double> rms_error;  // of the decoded mean against the clipped mean
};

std::vector<float> Change(size_t d, int site, int repeat) {
  std::mt19937_64 rng(1000003u * static_cast<uint64_t>(repeat) + static_cast<uint64_t>(site));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(d);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The distributed discrete Gaussian against quantized Gaussian noise, per site");
  int clients = 100;
  int64_t params = 1'000'000;
  int repeats = 3;
  double z = 1.0;
  double clip = 1.0;
  app.add_option("--clients", clients, "Sites in the sum")->check(CLI::Range(3, 100000));
  app.add_option("--params", params, "Parameters per update")->check(CLI::Range(1, 100000000));
  app.add_option("--repeats", repeats, "Rounds of each kind")->check(CLI::Range(1, 100));
  app.add_option("--noise-multiplier", z, "z")->check(CLI::PositiveNumber);
  app.add_option("--clip-norm", clip, "C")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const auto d = static_cast<size_t>(params);
  const double sigma = z * clip / std::sqrt(static_cast<double>(clients));

  // The quantized Gaussian path as distributed DP runs it: the round's default parameters.
  secagg::SecAggParams q = Check(secagg::DefaultSecAggParams(clients, 32, 1), "params");
  q.clip_range = 8.0;
  secagg::DdgEncoding e{
      .clip_norm = clip,
      .granularity = Check(secagg::DdgGranularity(clip, sigma, clients, d, 32), "granularity"),
      .site_stddev = sigma,
      .rotation_seed = 7};
  Result gauss, ddg;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> mean(d, 0.0);
    std::vector<uint64_t> sum_q(d + 1, 0), sum_d(secagg::DdgPaddedDimension(d) + 1, 0);
    std::vector<double> enc_q, enc_d;
    for (int s = 0; s < clients; ++s) {
      std::vector<float> x = Change(d, s, r);
      std::vector<float> clipped = x;
      Check(dp::ClipL2(clipped, clip).status(), "clip");
      for (size_t i = 0; i < d; ++i) mean[i] += clipped[i] / clients;
      // Gaussian: clip, noise, quantize.
      std::unique_ptr<dp::BitSource> bits = dp::MakeSecureBitSource();
      std::unique_ptr<secagg::RandomSource> rounding = secagg::MakeOsRandomSource();
      Clock::time_point t = Clock::now();
      std::vector<float> noised = x;
      Check(dp::ClipL2(noised, clip).status(), "clip");
      dp::GaussianSampler sampler(*bits);
      Check(dp::AddGaussianNoise(noised, sigma, sampler), "noise");
      std::vector<uint64_t> wq =
          Check(secagg::EncodeWeightedUpdate(q, noised, 1, *rounding), "quantize");
      enc_q.push_back(Since(t));
      // The discrete Gaussian.
      t = Clock::now();
      std::vector<uint64_t> wd = Check(secagg::EncodeDdg(e, x, *bits), "encode");
      enc_d.push_back(Since(t));
      for (size_t i = 0; i < wq.size(); ++i) sum_q[i] = (sum_q[i] + wq[i]) & 0xffffffffu;
      for (size_t i = 0; i < wd.size(); ++i) sum_d[i] = (sum_d[i] + wd[i]) & 0xffffffffu;
    }
    gauss.encode_s.push_back(Median(enc_q));
    ddg.encode_s.push_back(Median(enc_d));
    Clock::time_point t = Clock::now();
    std::vector<float> mq = Check(secagg::DecodeWeightedMean(q, sum_q), "decode");
    gauss.decode_s.push_back(Since(t));
    t = Clock::now();
    std::vector<float> md = Check(secagg::DecodeDdgMean(e, sum_d, d), "decode ddg");
    ddg.decode_s.push_back(Since(t));
    double eq = 0, ed = 0;
    for (size_t i = 0; i < d; ++i) {
      eq += (mq[i] - mean[i]) * (mq[i] - mean[i]);
      ed += (md[i] - mean[i]) * (md[i] - mean[i]);
    }
    gauss.rms_error.push_back(std::sqrt(eq / d));
    ddg.rms_error.push_back(std::sqrt(ed / d));
  }
  // One round of everyone, and 100 rounds drawing a tenth (fixed-size), delta 1e-5.
  const std::vector<double> orders = dp::DefaultRdpOrders();
  auto eps = [&](const std::vector<double>& rdp) {
    return Check(dp::RdpToEpsilon(orders, rdp, 1e-5), "epsilon").epsilon;
  };
  const double g1 = eps(Check(dp::ComputeRdp(1.0, z, 1, orders), "rdp"));
  const double g100 =
      eps(Check(dp::ComputeRdp(0.1, z, 100, orders, dp::Sampling::kFixedSize), "rdp"));
  const dp::DdgRelease release = secagg::DdgReleaseOf(e, d, clients);
  const double d1 = eps(Check(dp::ComputeDdgRdp(release, 1.0, 1, orders), "ddg rdp"));
  const double d100 = eps(Check(dp::ComputeDdgRdp(release, 0.1, 100, orders), "ddg rdp"));

  std::printf(
      "distributed DP noise: %d sites, %lld parameters (padded to %zu), z %g, C %g, "
      "sigma %.4g per site, 32-bit modulus, %d repeats (medians)\n",
      clients, static_cast<long long>(params), secagg::DdgPaddedDimension(d), z, clip, sigma,
      repeats);
  std::printf("%-28s %12s %12s %14s %12s %14s\n", "noise", "encode (s)", "decode (s)", "rms error",
              "eps 1 round", "eps 100 x q .1");
  std::printf("%-28s %12.4f %12.4f %14.6g %12.4f %14.4f\n", "gaussian, quantized",
              Median(gauss.encode_s), Median(gauss.decode_s), Median(gauss.rms_error), g1, g100);
  std::printf("%-28s %12.4f %12.4f %14.6g %12.4f %14.4f\n", "discrete gaussian",
              Median(ddg.encode_s), Median(ddg.decode_s), Median(ddg.rms_error), d1, d100);
  std::printf("ratio (discrete / gaussian)  %12.3f %12.3f %14.3f\n",
              Median(ddg.encode_s) / Median(gauss.encode_s),
              Median(ddg.decode_s) / Median(gauss.decode_s),
              Median(ddg.rms_error) / Median(gauss.rms_error));
  std::printf("expected rms error of the noise alone: sigma sqrt(n) / n = %.6g; granularity %.4g\n",
              sigma / std::sqrt(static_cast<double>(clients)), e.granularity);
  return 0;
}
