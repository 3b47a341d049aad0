#include "fl/simulation/partition.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/client/dataset.h"
#include "fl/common/random.h"

namespace fl::simulation {
namespace {

// NIID-Bench's smallest acceptable party size for the Dirichlet partition.
constexpr int64_t kMinPartySize = 10;
// Whole-partition redraws before giving up (the beta/parties combination is then hopeless).
constexpr int kMaxDirichletAttempts = 1000;
// MakePartition's names.
constexpr const char* kPartitionerNames[] = {"iid",    "dirichlet",     "label_k", "pathological",
                                             "shards", "quantity_skew", "sampled", "column"};

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

// Appends to `parts` the `num_parts` near-equal consecutive pieces of v (numpy.array_split: the
// first v.size() % num_parts pieces are one longer).
void ArraySplit(const std::vector<int64_t>& v, int64_t num_parts, Partition& parts) {
  const int64_t size = static_cast<int64_t>(v.size());
  const int64_t base = size / num_parts;
  const int64_t extra = size % num_parts;
  auto it = v.begin();
  for (int64_t i = 0; i < num_parts; ++i) {
    const int64_t n = base + (i < extra ? 1 : 0);
    parts.emplace_back(it, it + n);
    it += n;
  }
}

absl::Status CheckNumClients(int32_t num_clients) {
  if (num_clients < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_clients must be >= 1, not ", num_clients));
  }
  return absl::OkStatus();
}

absl::Status CheckBeta(double beta) {
  if (!(beta > 0) || !std::isfinite(beta)) {
    return absl::InvalidArgumentError(absl::StrCat("beta must be positive and finite, not ", beta));
  }
  return absl::OkStatus();
}

// The indices of each class, ascending; INVALID_ARGUMENT for a label outside [0, num_classes).
absl::StatusOr<Partition> IndicesByClass(const std::vector<int32_t>& labels, int32_t num_classes) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_classes must be >= 1, not ", num_classes));
  }
  Partition by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) {
    const int32_t y = labels[i];
    if (y < 0 || y >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y, " at index ", i, " is outside [0, ", num_classes, ")"));
    }
    by_class[static_cast<size_t>(y)].push_back(static_cast<int64_t>(i));
  }
  return by_class;
}

}  // namespace

absl::StatusOr<Partition> PartitionIid(int64_t num_examples, int32_t num_clients, uint64_t seed) {
  if (num_clients < 1 || num_clients > num_examples) {
    return absl::InvalidArgumentError(absl::StrCat("num_clients ", num_clients, " is not in [1, ",
                                                   num_examples, "] (the number of examples)"));
  }
  return client::SplitIid(num_examples, num_clients, seed);
}

absl::StatusOr<Partition> PartitionDirichlet(const std::vector<int32_t>& labels,
                                             int32_t num_classes, int32_t num_clients, double beta,
                                             uint64_t seed) {
  const int64_t n = static_cast<int64_t>(labels.size());
  if (absl::Status s = CheckNumClients(num_clients); !s.ok()) return s;
  absl::StatusOr<Partition> by_class = IndicesByClass(labels, num_classes);
  if (!by_class.ok()) return by_class.status();
  if (absl::Status s = CheckBeta(beta); !s.ok()) return s;
  if (n < kMinPartySize * num_clients) {
    return absl::InvalidArgumentError(absl::StrCat("cannot give each of num_clients ", num_clients,
                                                   " clients at least ", kMinPartySize, " of ", n,
                                                   " examples"));
  }

  std::mt19937_64 rng(seed);
  const double cap = static_cast<double>(n) / num_clients;  // a party this full gets no more
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(num_clients));
  for (int attempt = 0; attempt < kMaxDirichletAttempts; ++attempt) {
    for (auto& p : parts) p.clear();
    for (std::vector<int64_t>& idx : *by_class) {
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
  return absl::InvalidArgumentError(absl::StrCat("no Dirichlet(beta = ", beta, ") draw in ",
                                                 kMaxDirichletAttempts, " gave each of ",
                                                 num_clients, " clients at least ", kMinPartySize,
                                                 " examples; raise beta or use fewer clients"));
}

absl::StatusOr<Partition> PartitionShards(const std::vector<int32_t>& labels, int32_t num_clients,
                                          int32_t shards_per_client, uint64_t seed) {
  if (absl::Status s = CheckNumClients(num_clients); !s.ok()) return s;
  if (shards_per_client < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards_per_client must be >= 1, not ", shards_per_client));
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t num_shards = int64_t{num_clients} * shards_per_client;
  if (num_shards > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cut ", n, " examples into ", num_shards, " shards (num_clients ",
                     num_clients, " x shards_per_client ", shards_per_client, ")"));
  }
  std::vector<int64_t> sorted(static_cast<size_t>(n));
  std::iota(sorted.begin(), sorted.end(), int64_t{0});
  std::stable_sort(sorted.begin(), sorted.end(), [&labels](int64_t a, int64_t b) {
    return labels[static_cast<size_t>(a)] < labels[static_cast<size_t>(b)];
  });
  Partition shards;
  shards.reserve(static_cast<size_t>(num_shards));
  ArraySplit(sorted, num_shards, shards);

  std::mt19937_64 rng(seed);
  std::vector<int64_t> order(static_cast<size_t>(num_shards));
  std::iota(order.begin(), order.end(), int64_t{0});
  Shuffle(order, rng);
  Partition parts(static_cast<size_t>(num_clients));
  for (int64_t s = 0; s < num_shards; ++s) {
    const auto& shard = shards[static_cast<size_t>(order[static_cast<size_t>(s)])];
    auto& part = parts[static_cast<size_t>(s / shards_per_client)];
    part.insert(part.end(), shard.begin(), shard.end());
  }
  return parts;
}

absl::StatusOr<Partition> PartitionLabelK(const std::vector<int32_t>& labels, int32_t num_classes,
                                          int32_t num_clients, int32_t k, uint64_t seed) {
  if (absl::Status s = CheckNumClients(num_clients); !s.ok()) return s;
  absl::StatusOr<Partition> by_class = IndicesByClass(labels, num_classes);
  if (!by_class.ok()) return by_class.status();
  if (k < 1 || k > num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("k must be in [1, num_classes = ", num_classes, "], not ", k));
  }
  std::mt19937_64 rng(seed);
  // holders[c]: the parties holding class c, ascending.
  std::vector<std::vector<int32_t>> holders(static_cast<size_t>(num_classes));
  for (int32_t i = 0; i < num_clients; ++i) {
    std::vector<int32_t> chosen = {i % num_classes};
    while (static_cast<int32_t>(chosen.size()) < k) {
      const auto c = static_cast<int32_t>(UniformBelow(rng, static_cast<uint64_t>(num_classes)));
      if (std::find(chosen.begin(), chosen.end(), c) == chosen.end()) chosen.push_back(c);
    }
    for (int32_t c : chosen) holders[static_cast<size_t>(c)].push_back(i);
  }
  Partition parts(static_cast<size_t>(num_clients));
  for (int32_t c = 0; c < num_classes; ++c) {
    const std::vector<int32_t>& h = holders[static_cast<size_t>(c)];
    if (h.empty()) continue;  // as NIID-Bench: nobody gets this class
    std::vector<int64_t>& idx = (*by_class)[static_cast<size_t>(c)];
    Shuffle(idx, rng);
    Partition pieces;
    ArraySplit(idx, static_cast<int64_t>(h.size()), pieces);
    for (size_t j = 0; j < h.size(); ++j) {
      auto& part = parts[static_cast<size_t>(h[j])];
      part.insert(part.end(), pieces[j].begin(), pieces[j].end());
    }
  }
  return parts;
}

absl::StatusOr<Partition> PartitionQuantitySkew(int64_t num_examples, int32_t num_clients,
                                                double beta, uint64_t seed) {
  if (absl::Status s = CheckNumClients(num_clients); !s.ok()) return s;
  if (absl::Status s = CheckBeta(beta); !s.ok()) return s;
  if (num_examples < kMinPartySize * num_clients) {
    return absl::InvalidArgumentError(absl::StrCat("num_examples ", num_examples, " is fewer than ",
                                                   kMinPartySize, " per client for num_clients ",
                                                   num_clients));
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(static_cast<size_t>(num_examples));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Shuffle(perm, rng);
  std::vector<int64_t> ends(static_cast<size_t>(num_clients));
  for (int attempt = 0; attempt < kMaxDirichletAttempts; ++attempt) {
    const std::vector<double> p = DrawDirichlet(num_clients, beta, rng);
    double cumulative = 0;
    int64_t begin = 0;
    bool big_enough = true;
    for (int32_t j = 0; j < num_clients; ++j) {
      int64_t end = num_examples;
      if (j + 1 < num_clients) {
        cumulative += p[static_cast<size_t>(j)];
        end = std::clamp(static_cast<int64_t>(cumulative * static_cast<double>(num_examples)),
                         begin, num_examples);
      }
      big_enough = big_enough && end - begin >= kMinPartySize;
      ends[static_cast<size_t>(j)] = end;
      begin = end;
    }
    if (!big_enough) continue;
    Partition parts(static_cast<size_t>(num_clients));
    begin = 0;
    for (int32_t j = 0; j < num_clients; ++j) {
      const int64_t end = ends[static_cast<size_t>(j)];
      parts[static_cast<size_t>(j)].assign(perm.begin() + begin, perm.begin() + end);
      begin = end;
    }
    return parts;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no Dirichlet(beta = ", beta, ") draw in ", kMaxDirichletAttempts,
                   " gave each of ", num_clients, " clients at least ", kMinPartySize, " of ",
                   num_examples, " examples; raise beta or use fewer clients"));
}

absl::StatusOr<Partition> PartitionByColumn(const std::vector<std::string>& keys) {
  if (keys.empty()) return absl::InvalidArgumentError("keys must not be empty, got 0 rows");
  std::map<std::string, std::vector<int64_t>> by_key;
  for (size_t i = 0; i < keys.size(); ++i) by_key[keys[i]].push_back(static_cast<int64_t>(i));
  Partition parts;
  parts.reserve(by_key.size());
  for (auto& [key, idx] : by_key) parts.push_back(std::move(idx));
  return parts;
}

absl::StatusOr<Partition> PartitionSampled(int64_t num_examples, int32_t num_clients,
                                           int64_t examples_per_party, uint64_t seed) {
  if (absl::Status s = CheckNumClients(num_clients); !s.ok()) return s;
  if (examples_per_party < 1 || examples_per_party > num_examples) {
    return absl::InvalidArgumentError(absl::StrCat("examples_per_party ", examples_per_party,
                                                   " is not in [1, ", num_examples, "]"));
  }
  std::mt19937_64 rng(seed);
  Partition parts(static_cast<size_t>(num_clients));
  std::vector<int64_t> chosen;
  for (std::vector<int64_t>& part : parts) {
    // Floyd's algorithm: examples_per_party distinct indices in O(examples_per_party) draws.
    chosen.clear();
    for (int64_t j = num_examples - examples_per_party; j < num_examples; ++j) {
      const int64_t t = std::uniform_int_distribution<int64_t>(0, j)(rng);
      const bool seen = std::find(chosen.begin(), chosen.end(), t) != chosen.end();
      chosen.push_back(seen ? j : t);
    }
    std::sort(chosen.begin(), chosen.end());
    part = chosen;
  }
  return parts;
}

absl::StatusOr<Partition> MakePartition(const PartitionSpec& spec,
                                        const std::vector<int32_t>& labels, int32_t num_classes,
                                        int32_t num_clients,
                                        const std::vector<std::string>& column) {
  const int64_t n = static_cast<int64_t>(labels.size());
  const std::string& name = spec.name;
  if (name == "iid") return PartitionIid(n, num_clients, spec.seed);
  if (name == "dirichlet") {
    return PartitionDirichlet(labels, num_classes, num_clients, spec.beta, spec.seed);
  }
  if (name == "label_k" || name == "pathological") {
    return PartitionLabelK(labels, num_classes, num_clients, spec.k, spec.seed);
  }
  if (name == "shards") {
    return PartitionShards(labels, num_clients, spec.shards_per_client, spec.seed);
  }
  if (name == "quantity_skew") return PartitionQuantitySkew(n, num_clients, spec.beta, spec.seed);
  if (name == "sampled") {
    return PartitionSampled(n, num_clients, spec.examples_per_party, spec.seed);
  }
  if (name == "column") {
    if (static_cast<int64_t>(column.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("column has ", column.size(), " values but the dataset has ", n, " rows"));
    }
    absl::StatusOr<Partition> parts = PartitionByColumn(column);
    if (parts.ok() && num_clients != 0 && static_cast<size_t>(num_clients) != parts->size()) {
      return absl::InvalidArgumentError(absl::StrCat("num_clients ", num_clients,
                                                     " must be 0 or the column's ", parts->size(),
                                                     " distinct values"));
    }
    return parts;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown partitioner name \"", name,
                   "\"; valid names: ", absl::StrJoin(kPartitionerNames, ", ")));
}

}  // namespace fl::simulation
