// Portable seeded randomness: the same seed gives the same draws with every standard library
// (std::uniform_int_distribution and std::shuffle are implementation-defined), so sampled
// clients, partitions and batch orders are reproducible everywhere.
#ifndef FL_COMMON_RANDOM_H_
#define FL_COMMON_RANDOM_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace fl {

// An unbiased draw from [0, bound); bound > 0.
inline uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

// Fisher-Yates.
template <typename T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[UniformBelow(rng, i)]);
}

}  // namespace fl

#endif  // FL_COMMON_RANDOM_H_
