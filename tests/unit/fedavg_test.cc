#include "fl/aggregation/fedavg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <latch>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/proc_status.h"

namespace fl::aggregation {
namespace {

using fl::testing::ProcStatusMiB;
using ::testing::HasSubstr;

// The aggregator locks its sum in stripes of 1 MiB (262144 floats); this spec spans three of
// them, so chunks cross stripe boundaries.
ModelSpec MultiStripeSpec() { return ModelSpec({{"w", {600, 1000}}, {"b", {1000}}, {"s", {}}}); }

Model RandomModel(const ModelSpec& spec, uint32_t seed) {
  Model model(spec);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : model.data()) v = dist(rng);
  return model;
}

// Random example counts, as a client would report.
std::vector<double> RandomWeights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, 5000);
  std::vector<double> weights;
  for (size_t i = 0; i < n; ++i) weights.push_back(dist(rng));
  return weights;
}

// Random chunk boundaries: [offset, size) pairs covering [0, num_floats) in order.
std::vector<std::pair<int64_t, int64_t>> RandomChunks(int64_t num_floats, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> size(1, 300000);
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t offset = 0; offset < num_floats;) {
    int64_t n = std::min(size(rng), num_floats - offset);
    chunks.emplace_back(offset, n);
    offset += n;
  }
  return chunks;
}

void FoldChunks(RoundAggregator& agg, const Model& model, double weight,
                const std::vector<std::pair<int64_t, int64_t>>& chunks) {
  for (const auto& [offset, n] : chunks) {
    agg.Fold(offset, model.data().subspan(static_cast<size_t>(offset), static_cast<size_t>(n)),
             weight);
  }
}

// Relative tolerance 1e-6, with a floor so values that cancel to almost zero are not held to an
// impossible standard.
void ExpectClose(const Model& actual, const Model& expected) {
  ASSERT_EQ(actual.spec(), expected.spec());
  std::span<const float> a = actual.data();
  std::span<const float> e = expected.data();
  int failures = 0;
  for (size_t i = 0; i < e.size() && failures < 10; ++i) {
    const double tol = 1e-6 * std::max(std::abs(static_cast<double>(e[i])), 1e-3);
    if (!(std::abs(static_cast<double>(a[i]) - e[i]) <= tol)) {
      ADD_FAILURE() << "parameter " << i << ": got " << a[i] << ", expected " << e[i];
      ++failures;
    }
  }
}

std::vector<const Model*> Pointers(const std::vector<Model>& models) {
  std::vector<const Model*> out;
  for (const Model& m : models) out.push_back(&m);
  return out;
}

class FedAvgTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t i = 0; i < 8; ++i) models_.push_back(RandomModel(MultiStripeSpec(), 100 + i));
    weights_ = RandomWeights(models_.size(), 7);
    absl::StatusOr<Model> expected = WeightedAverage(Pointers(models_), weights_);
    ASSERT_TRUE(expected.ok()) << expected.status();
    expected_ = std::make_unique<Model>(std::move(*expected));
  }

  std::unique_ptr<RoundAggregator> BeginRound() {
    Model global(MultiStripeSpec());
    return strategy_->BeginRound(global);
  }

  std::unique_ptr<Strategy> strategy_ = MakeFedAvg();
  std::vector<Model> models_;
  std::vector<double> weights_;
  std::unique_ptr<Model> expected_;
};

TEST(WeightedAverageTest, MatchesHandComputation) {
  ModelSpec spec({{"w", {2}}, {"b", {1}}});
  Model a(spec), b(spec), c(spec);
  const std::vector<float> av = {1, 2, 3}, bv = {3, 6, -3}, cv = {-2, 0, 7};
  std::copy(av.begin(), av.end(), a.data().begin());
  std::copy(bv.begin(), bv.end(), b.data().begin());
  std::copy(cv.begin(), cv.end(), c.data().begin());

  // Weights 1, 3, 4 (total 8):
  //   w[0] = (1*1 + 3*3 + 4*-2) / 8 = 2/8   = 0.25
  //   w[1] = (1*2 + 3*6 + 4*0)  / 8 = 20/8  = 2.5
  //   b[0] = (1*3 + 3*-3 + 4*7) / 8 = 22/8  = 2.75
  absl::StatusOr<Model> avg = WeightedAverage({&a, &b, &c}, {1.0, 3.0, 4.0});
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ(avg->spec(), spec);
  EXPECT_EQ(avg->data()[0], 0.25f);
  EXPECT_EQ(avg->data()[1], 2.5f);
  EXPECT_EQ(avg->data()[2], 2.75f);

  // Scaling every weight does not change the average; one model averages to itself.
  absl::StatusOr<Model> scaled = WeightedAverage({&a, &b, &c}, {0.5, 1.5, 2.0});
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ(scaled->data()[0], 0.25f);
  EXPECT_EQ(scaled->data()[2], 2.75f);
  absl::StatusOr<Model> single = WeightedAverage({&b}, {42.0});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->data()[1], 6.0f);
}

TEST(WeightedAverageTest, Refusals) {
  ModelSpec spec({{"w", {2, 3}}});
  Model a(spec), b(spec);
  Model transposed(ModelSpec({{"w", {3, 2}}}));  // same size, other spec
  Model renamed(ModelSpec({{"v", {2, 3}}}));

  EXPECT_EQ(WeightedAverage({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightedAverage({&a, &b}, {1.0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightedAverage({&a}, {1.0, 2.0}).status().code(), absl::StatusCode::kInvalidArgument);

  for (double bad : {0.0, -1.0, -0.0, std::numeric_limits<double>::quiet_NaN()}) {
    absl::StatusOr<Model> s = WeightedAverage({&a, &b}, {1.0, bad});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("weight 1 is not positive")) << bad;
  }

  for (const Model* other : {&transposed, &renamed}) {
    absl::StatusOr<Model> s = WeightedAverage({&a, other}, {1.0, 1.0});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("model 1 has another spec"));
  }
}

TEST_F(FedAvgTest, StrategyNameAndRoundSpec) {
  EXPECT_EQ(strategy_->name(), "fedavg");
  std::unique_ptr<RoundAggregator> agg = BeginRound();
  EXPECT_EQ(agg->num_accepted(), 0);
  FoldChunks(*agg, models_[0], 3.0, RandomChunks(MultiStripeSpec().NumFloats(), 1));
  agg->Accept(3.0);
  EXPECT_EQ(agg->num_accepted(), 1);
  absl::StatusOr<Model> out = agg->Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->spec(), MultiStripeSpec());
  ExpectClose(*out, models_[0]);  // the average of one model is that model
}

TEST_F(FedAvgTest, ChunkedFoldEqualsWeightedAverage) {
  std::unique_ptr<RoundAggregator> agg = BeginRound();
  const int64_t n = MultiStripeSpec().NumFloats();
  for (size_t i = 0; i < models_.size(); ++i) {
    // Each client cuts its upload differently; one sends everything in a single fold.
    std::vector<std::pair<int64_t, int64_t>> chunks =
        i == 3 ? std::vector<std::pair<int64_t, int64_t>>{{0, n}}
               : RandomChunks(n, 1000 + static_cast<uint32_t>(i));
    FoldChunks(*agg, models_[i], weights_[i], chunks);
    agg->Accept(weights_[i]);
  }
  EXPECT_EQ(agg->num_accepted(), 8);
  absl::StatusOr<Model> out = agg->Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose(*out, *expected_);
}

TEST_F(FedAvgTest, ChunksOfDifferentUpdatesMayInterleave) {
  std::unique_ptr<RoundAggregator> agg = BeginRound();
  const int64_t n = MultiStripeSpec().NumFloats();
  // Every (model, chunk) pair in a random order, as uploads arrive over one connection each.
  std::vector<std::pair<size_t, std::pair<int64_t, int64_t>>> work;
  for (size_t i = 0; i < models_.size(); ++i) {
    for (const auto& chunk : RandomChunks(n, 2000 + static_cast<uint32_t>(i))) {
      work.emplace_back(i, chunk);
    }
  }
  std::shuffle(work.begin(), work.end(), std::mt19937(99));
  for (const auto& [i, chunk] : work) {
    agg->Fold(chunk.first, models_[i].data().subspan(chunk.first, chunk.second), weights_[i]);
  }
  for (double w : weights_) agg->Accept(w);
  absl::StatusOr<Model> out = agg->Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose(*out, *expected_);
}

TEST(FedAvgFiniteTest, AnOverflowingAverageIsRefused) {
  ModelSpec spec({{"w", {4}}});
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  Model global(spec);
  std::unique_ptr<RoundAggregator> agg = fedavg->BeginRound(global);
  const std::vector<float> huge(4, 3e38f);
  agg->Fold(0, huge, 1e300);
  agg->Accept(1e300);
  agg->Fold(0, huge, 1e300);
  agg->Accept(1e300);
  absl::StatusOr<Model> out = agg->Finish();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("not finite at parameter 0"), absl::string_view::npos)
      << out.status();
}

// A large model's next model is built by several threads, a stripe each in turn: the parameter
// named is still the first that overflows, wherever the threads were, and the others are right.
TEST(FedAvgFiniteTest, TheFirstOverflowIsNamedWhenSeveralThreadsBuildTheModel) {
  const int64_t n = int64_t{3} << 20;  // 12 stripes of the sum
  ModelSpec spec({{"w", {n}}});
  Model global(spec);
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  std::vector<float> values(static_cast<size_t>(n), 1.0f);
  for (int64_t i = 0; i < n; i += 1000) values[static_cast<size_t>(i)] = static_cast<float>(i);

  std::unique_ptr<RoundAggregator> agg = fedavg->BeginRound(global);
  agg->Fold(0, values, 2.0);
  agg->Accept(2.0);
  absl::StatusOr<Model> mean = agg->Finish();
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_TRUE(std::equal(values.begin(), values.end(), mean->data().begin()));

  // Weighed 10 but counted as 1: 10x each value, beyond float at the two placed here: the last of
  // one stripe (262144 parameters each) and the first of the next, and one further on.
  values[2'621'439] = values[2'621'440] = values[2'900'000] = 3e38f;
  agg = fedavg->BeginRound(global);
  agg->Fold(0, values, 10.0);
  agg->Accept(1.0);
  absl::StatusOr<Model> out = agg->Finish();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("not finite at parameter 2621439 "),
            absl::string_view::npos)
      << out.status();
}

// The server holds the global model and one sum during a round; the next model must be built
// without a further full copy, so the round's peak is the float64 sum (2x the model) and never
// the sum plus the result (3x).
TEST(FedAvgMemoryTest, TheNextModelIsBuiltWithoutHoldingTheSumAndTheResultInFull) {
  std::ofstream reset("/proc/self/clear_refs");
  if (!reset) GTEST_SKIP() << "cannot reset the peak resident memory (/proc/self/clear_refs)";
  const int64_t n = int64_t{32} << 20;  // 128 MiB of float32
  const double model_mib = static_cast<double>(n) * sizeof(float) / (1 << 20);
  Model global(ModelSpec({{"w", {n}}}));
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  std::vector<float> chunk(1 << 18);  // 1 MiB, as the server folds from its spill
  reset << "5" << std::flush;         // VmHWM := VmRSS
  if (!reset.good()) GTEST_SKIP() << "cannot reset the peak resident memory";
  const double base = ProcStatusMiB("VmRSS");
  absl::StatusOr<Model> next;
  {
    std::unique_ptr<RoundAggregator> agg = fedavg->BeginRound(global);
    for (int client = 0; client < 3; ++client) {
      for (int64_t off = 0; off < n; off += static_cast<int64_t>(chunk.size())) {
        std::fill(chunk.begin(), chunk.end(), static_cast<float>(client + 1));
        agg->Fold(off, chunk, 1.0 + client);
      }
      agg->Accept(1.0 + client);
    }
    next = agg->Finish();
  }
  ASSERT_TRUE(next.ok()) << next.status();
  // (1 x 1 + 2 x 2 + 3 x 3) / 6
  EXPECT_FLOAT_EQ(next->data().front(), 14.0f / 6.0f);
  EXPECT_FLOAT_EQ(next->data().back(), 14.0f / 6.0f);
  const double peak = ProcStatusMiB("VmHWM") - base;
  EXPECT_LT(peak, 2.25 * model_mib)
      << "peak over the round's start: " << peak << " MiB for a " << model_mib << " MiB model";
  EXPECT_GT(peak, 1.75 * model_mib) << "the sum itself is float64";
}

TEST_F(FedAvgTest, FinishWithNothingAcceptedFails) {
  std::unique_ptr<RoundAggregator> empty = BeginRound();
  absl::StatusOr<Model> out = empty->Finish();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("no update was accepted"));

  // Folded but never accepted (every upload was refused) is the same.
  std::unique_ptr<RoundAggregator> refused = BeginRound();
  FoldChunks(*refused, models_[0], weights_[0], RandomChunks(MultiStripeSpec().NumFloats(), 5));
  EXPECT_EQ(refused->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FedAvgTest, ConcurrentFoldsEqualSequential) {
  const int64_t n = MultiStripeSpec().NumFloats();
  std::vector<std::vector<std::pair<int64_t, int64_t>>> chunks;
  for (size_t i = 0; i < models_.size(); ++i) {
    chunks.push_back(RandomChunks(n, 4000 + static_cast<uint32_t>(i)));
  }

  std::unique_ptr<RoundAggregator> sequential = BeginRound();
  for (size_t i = 0; i < models_.size(); ++i) {
    FoldChunks(*sequential, models_[i], weights_[i], chunks[i]);
    sequential->Accept(weights_[i]);
  }
  absl::StatusOr<Model> sequential_out = sequential->Finish();
  ASSERT_TRUE(sequential_out.ok()) << sequential_out.status();

  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<RoundAggregator> concurrent = BeginRound();
    std::latch start(static_cast<std::ptrdiff_t>(models_.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < models_.size(); ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();  // all threads fold at once, contending for the same stripes
        FoldChunks(*concurrent, models_[i], weights_[i], chunks[i]);
        concurrent->Accept(weights_[i]);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(concurrent->num_accepted(), 8);
    absl::StatusOr<Model> concurrent_out = concurrent->Finish();
    ASSERT_TRUE(concurrent_out.ok()) << concurrent_out.status();
    ExpectClose(*concurrent_out, *sequential_out);
    ExpectClose(*concurrent_out, *expected_);
  }
}

}  // namespace
}  // namespace fl::aggregation
