#include "fl/simulation/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/random.h"

namespace fl::simulation {
namespace {

// NIID-Bench's smallest acceptable party size for the Dirichlet partition.
constexpr int64_t kMinPartySize = 10;
// Whole-partition redraws before giving up (the beta/parties combination is then hopeless).
constexpr int kMaxDirichletAttempts = 1000;

// p ~ Dir(beta, ..., beta) over `n` parties, from normalised Gamma(beta, 1) draws. Redraws in the
// (for tiny beta possible) case that every draw underflows to zero.
std::vector<double> DrawDirichlet(int32_t n, double beta, std::mt19937_64& rng) {
  std::gamma_distribution<double> gamma(beta, 1.0);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  while (sum <= 0) {
    for (double& x : p) x = gamma(rng);
    sum = std::accumulate(p.begin(), p.end(), 0.0);
  }
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> PartitionIid(int64_t num_examples,
                                                               int32_t num_clients, uint64_t seed) {
  if (num_clients < 1 || num_clients > num_examples) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", num_examples, " examples among ", num_clients, " clients"));
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(static_cast<size_t>(num_examples));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Shuffle(perm, rng);
  // As numpy.array_split: the first (num_examples % num_clients) parts get one more.
  const int64_t base = num_examples / num_clients;
  const int64_t extra = num_examples % num_clients;
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(num_clients));
  auto it = perm.begin();
  for (int32_t i = 0; i < num_clients; ++i) {
    const int64_t size = base + (i < extra ? 1 : 0);
    parts[static_cast<size_t>(i)].assign(it, it + size);
    it += size;
  }
  return parts;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> PartitionDirichlet(
    const std::vector<int32_t>& labels, int32_t num_classes, int32_t num_clients, double beta,
    uint64_t seed) {
  const int64_t n = static_cast<int64_t>(labels.size());
  if (num_clients < 1 || num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("need at least one client and one class, got ",
                                                   num_clients, " and ", num_classes));
  }
  if (!(beta > 0) || !std::isfinite(beta)) {
    return absl::InvalidArgumentError(absl::StrCat("beta must be positive and finite, not ", beta));
  }
  if (n < kMinPartySize * num_clients) {
    return absl::InvalidArgumentError(absl::StrCat("cannot give each of ", num_clients,
                                                   " clients at least ", kMinPartySize, " of ", n,
                                                   " examples"));
  }
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(num_classes));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = labels[static_cast<size_t>(i)];
    if (y < 0 || y >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y, " at index ", i, " is outside [0, ", num_classes, ")"));
    }
    by_class[static_cast<size_t>(y)].push_back(i);
  }

  std::mt19937_64 rng(seed);
  const double cap = static_cast<double>(n) / num_clients;  // a party this full gets no more
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(num_clients));
  for (int attempt = 0; attempt < kMaxDirichletAttempts; ++attempt) {
    for (auto& p : parts) p.clear();
    for (std::vector<int64_t>& idx : by_class) {
      if (idx.empty()) continue;
      Shuffle(idx, rng);
      std::vector<double> p;
      double sum = 0;
      // Redraw when the mass falls only on full parties (all zero after the cap). A party below
      // the cap always exists here: the parties together hold fewer than n samples.
      while (sum <= 0) {
        p = DrawDirichlet(num_clients, beta, rng);
        for (int32_t j = 0; j < num_clients; ++j) {
          if (static_cast<double>(parts[static_cast<size_t>(j)].size()) >= cap) {
            p[static_cast<size_t>(j)] = 0;
          }
        }
        sum = std::accumulate(p.begin(), p.end(), 0.0);
      }
      // Split at the truncated cumulative proportions; the last party takes the rest.
      const int64_t size = static_cast<int64_t>(idx.size());
      double cumulative = 0;
      int64_t begin = 0;
      for (int32_t j = 0; j < num_clients; ++j) {
        int64_t end = size;
        if (j + 1 < num_clients) {
          cumulative += p[static_cast<size_t>(j)] / sum;
          end =
              std::clamp(static_cast<int64_t>(cumulative * static_cast<double>(size)), begin, size);
        }
        auto& part = parts[static_cast<size_t>(j)];
        part.insert(part.end(), idx.begin() + begin, idx.begin() + end);
        begin = end;
      }
    }
    const bool big_enough = std::all_of(parts.begin(), parts.end(), [](const auto& p) {
      return static_cast<int64_t>(p.size()) >= kMinPartySize;
    });
    if (big_enough) {
      for (auto& p : parts) Shuffle(p, rng);
      return parts;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "no Dirichlet(", beta, ") draw in ", kMaxDirichletAttempts, " gave each of ", num_clients,
      " clients at least ", kMinPartySize, " examples; raise beta or use fewer clients"));
}

}  // namespace fl::simulation
