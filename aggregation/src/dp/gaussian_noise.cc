#include "fl/aggregation/dp/gaussian_noise.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace fl::aggregation::dp {
namespace {

class SecureBitSource final : public BitSource {
 public:
  absl::Status Fill(std::span<uint8_t> out) override {
    // RAND_bytes takes an int length; fill in pieces so any span size works.
    size_t done = 0;
    while (done < out.size()) {
      const size_t n = std::min<size_t>(out.size() - done, 1 << 20);
      if (RAND_bytes(out.data() + done, static_cast<int>(n)) != 1) {
        char reason[256];
        ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
        return absl::InternalError(absl::StrCat("RAND_bytes failed: ", reason));
      }
      done += n;
    }
    return absl::OkStatus();
  }
};

class SeededBitSource final : public BitSource {
 public:
  explicit SeededBitSource(uint64_t seed) : state_(seed) {}
  absl::Status Fill(std::span<uint8_t> out) override {
    for (size_t i = 0; i < out.size(); i += 8) {
      // SplitMix64 (Steele, Lea, Flood 2014).
      uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      for (size_t b = 0; b < 8 && i + b < out.size(); ++b) {
        out[i + b] = static_cast<uint8_t>(z >> (8 * b));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint64_t state_;
};

template <typename T>
absl::Status AddNoise(std::span<T> values, double stddev, GaussianSampler& sampler) {
  if (!std::isfinite(stddev) || stddev < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("noise standard deviation must be a finite number >= 0, got ", stddev));
  }
  if (stddev == 0) return absl::OkStatus();
  for (T& v : values) {
    absl::StatusOr<double> g = sampler.Next();
    if (!g.ok()) return g.status();
    v = static_cast<T>(v + stddev * *g);
  }
  return absl::OkStatus();
}

absl::Status CheckPositive(const char* name, double value) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a finite number > 0, got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<BitSource> MakeSecureBitSource() { return std::make_unique<SecureBitSource>(); }

std::unique_ptr<BitSource> MakeSeededBitSource(uint64_t seed) {
  return std::make_unique<SeededBitSource>(seed);
}

absl::StatusOr<uint64_t> UniformSampler::NextWord() {
  if (buffer_pos_ + 8 > sizeof(buffer_)) {
    if (absl::Status s = source_.Fill(buffer_); !s.ok()) return s;
    buffer_pos_ = 0;
  }
  uint64_t word = 0;
  for (int b = 0; b < 8; ++b) word |= static_cast<uint64_t>(buffer_[buffer_pos_ + b]) << (8 * b);
  buffer_pos_ += 8;
  return word;
}

absl::StatusOr<double> UniformSampler::NextDouble() {
  absl::StatusOr<uint64_t> word = NextWord();
  if (!word.ok()) return word.status();
  return static_cast<double>(*word >> 11) * 0x1p-53;
}

absl::StatusOr<double> GaussianSampler::Next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  absl::StatusOr<uint64_t> k1 = words_.NextWord();
  if (!k1.ok()) return k1.status();
  absl::StatusOr<uint64_t> k2 = words_.NextWord();
  if (!k2.ok()) return k2.status();
  constexpr double kTwoPow53 = 9007199254740992.0;
  const double u1 = (static_cast<double>(*k1 >> 11) + 1.0) / kTwoPow53;  // (0, 1]
  const double u2 = static_cast<double>(*k2 >> 11) / kTwoPow53;          // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

absl::Status AddGaussianNoise(std::span<float> values, double stddev, GaussianSampler& sampler) {
  return AddNoise(values, stddev, sampler);
}

absl::Status AddGaussianNoise(std::span<double> values, double stddev, GaussianSampler& sampler) {
  return AddNoise(values, stddev, sampler);
}

absl::StatusOr<double> CentralNoiseStddev(double noise_multiplier, double clip_norm) {
  if (absl::Status s = CheckPositive("noise multiplier", noise_multiplier); !s.ok()) return s;
  if (absl::Status s = CheckPositive("clip norm", clip_norm); !s.ok()) return s;
  return noise_multiplier * clip_norm;
}

absl::StatusOr<double> DistributedNoiseStddev(double noise_multiplier, double clip_norm,
                                              int num_clients) {
  absl::StatusOr<double> central = CentralNoiseStddev(noise_multiplier, clip_norm);
  if (!central.ok()) return central.status();
  if (num_clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of clients sharing the noise must be >= 1, got ", num_clients));
  }
  return *central / std::sqrt(static_cast<double>(num_clients));
}

}  // namespace fl::aggregation::dp
