// The server optimizers against FedAvg on the same round (issue 16: "at FedAvg's speed, within
// 10 %"): K updates of a model of P parameters folded into a round's aggregator, then Finish
// (and the state taken and adopted, as the engine's commit does), timed whole.
//   server_optimizer_bench [--params 25000000] [--updates 10] [--repeats 5]
// Each strategy runs --repeats rounds, interleaved with the others; the table gives the median
// round time and its ratio to FedAvg's median in the same run.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "fl/aggregation/strategies.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Server optimizers against FedAvg: one round's fold and finish"};
  int64_t params = 25'000'000;
  int updates = 10;
  int repeats = 5;
  app.add_option("--params", params, "model parameters")->check(CLI::Range(1000, 500'000'000));
  app.add_option("--updates", updates, "updates folded a round")->check(CLI::Range(1, 100));
  app.add_option("--repeats", repeats, "rounds per strategy")->check(CLI::Range(1, 50));
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> names = {"fedavg", "fedavgm", "fedadagrad", "fedadam", "fedyogi"};
  fl::Model global(fl::ModelSpec({{"w", {params}}}));
  fl::Model update(global.spec());
  for (int64_t i = 0; i < params; ++i) {
    global.data()[i] = 1e-3f * static_cast<float>(i % 997);
    update.data()[i] = 1e-3f * static_cast<float>(i % 991);
  }
  std::map<std::string, std::unique_ptr<fl::aggregation::Strategy>> strategies;
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<fl::aggregation::Strategy>> s =
        fl::aggregation::MakeStrategy({.name = name});
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), s.status().ToString().c_str());
      return 1;
    }
    strategies[name] = *std::move(s);
  }
  std::map<std::string, std::vector<double>> seconds;
  for (int r = 0; r < repeats; ++r) {
    for (const std::string& name : names) {
      fl::aggregation::Strategy& s = *strategies[name];
      const absl::Time start = absl::Now();
      std::unique_ptr<fl::aggregation::RoundAggregator> agg = s.BeginRound(global);
      for (int k = 0; k < updates; ++k) {
        agg->Fold(0, update.data(), 1.0 + k);
        agg->Accept(1.0 + k);
      }
      absl::StatusOr<fl::Model> next = agg->Finish();
      if (!next.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), next.status().ToString().c_str());
        return 1;
      }
      std::optional<fl::Model> state = agg->TakeState();
      agg.reset();  // as the engine does before its commit adopts the state
      if (state.has_value()) {
        if (absl::Status st = s.AdoptState(*std::move(state)); !st.ok()) return 1;
      }
      seconds[name].push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  std::printf("%lld parameters, %d updates a round, %d rounds each (medians)\n\n",
              static_cast<long long>(params), updates, repeats);
  std::printf("| strategy | round (s) | vs fedavg |\n|---|---|---|\n");
  const double base = Median(seconds["fedavg"]);
  for (const std::string& name : names) {
    const double m = Median(seconds[name]);
    std::printf("| %s | %.3f | %.2fx |\n", name.c_str(), m, m / base);
  }
  return 0;
}
