// Prints what a federated run achieved, from the server's data directory: one row per committed
// round (training loss and accuracy reported by the sites, the federated evaluation on the
// sites' held-out data) and, given test CSV files, each round's global model scored on them with
// accuracy and the area under the ROC curve (AUC).
//
//   run_report --data-dir server-data --model mlp --hidden 32 --label-column fraud
//       --test bank-a=bank-a-test.csv --test bank-b=bank-b-test.csv
//
// Why it exists: the server records a federated evaluation's loss and accuracy but not its
// other metrics (the built-in models' "auc"), so the examples score the committed checkpoints
// themselves. The store is opened read-only; the server may still be running.
//
// The last line is for scripts: "final: status=finished rounds=N fed_accuracy=X accuracy=Y auc=Z"
// (the last two only with --test). Exit status 0 when the run finished, 1 otherwise.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/server/store.h"
#include "nlohmann/json.hpp"

namespace {

struct TestSet {
  std::string name;
  fl::client::Dataset data;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "run_report: %s\n", s.ToString().c_str());
  return 1;
}

std::map<std::string, double> ParseMetrics(const std::string& json) {
  std::map<std::string, double> out;
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    if (v.is_number()) out[k] = v.get<double>();
  }
  return out;
}

std::string Cell(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "-" : absl::StrFormat("%.4f", it->second);
}

// Every test set's rows in one dataset, so that the pooled AUC ranks all sites' cases together.
fl::client::Dataset Pool(const std::vector<TestSet>& sets) {
  fl::client::Dataset pooled;
  for (const TestSet& s : sets) {
    pooled.num_features = s.data.num_features;
    pooled.num_classes = std::max(pooled.num_classes, s.data.num_classes);
    pooled.features.insert(pooled.features.end(), s.data.features.begin(), s.data.features.end());
    pooled.labels.insert(pooled.labels.end(), s.data.labels.begin(), s.data.labels.end());
  }
  return pooled;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-round report of a federated run, with the models scored on test CSV files"};
  std::string data_dir, model_kind = "softmax", label_column = "label";
  std::vector<int64_t> hidden = {200};
  std::vector<std::string> tests;
  int32_t classes = 2;
  std::optional<int64_t> run_id;
  app.add_option("--data-dir", data_dir, "The server's data directory")->required();
  app.add_option("--run", run_id, "Run id (default: the newest run)");
  app.add_option("--model", model_kind, "The run's model: softmax or mlp")->capture_default_str();
  app.add_option("--hidden", hidden, "mlp: hidden layer widths")->capture_default_str();
  app.add_option("--classes", classes, "The model's classes")->capture_default_str();
  app.add_option("--label-column", label_column)->capture_default_str();
  app.add_option("--test", tests, "NAME=FILE.csv: a test set to score each round's model on");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<std::unique_ptr<fl::server::Store>> store =
      fl::server::Store::OpenReadOnly(data_dir);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<fl::server::RunRecord> run =
      run_id ? (*store)->GetRun(*run_id) : absl::StatusOr<fl::server::RunRecord>();
  if (!run_id) {
    absl::StatusOr<std::vector<fl::server::RunRecord>> runs = (*store)->Runs();
    if (!runs.ok()) return Fail(runs.status());
    if (runs->empty()) return Fail(absl::NotFoundError(absl::StrCat("no run in ", data_dir)));
    run = runs->back();
  }
  if (!run.ok()) return Fail(run.status());

  std::vector<TestSet> sets;
  for (const std::string& t : tests) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--test '", t, "' is not NAME=FILE")));
    }
    absl::StatusOr<fl::client::Dataset> d =
        fl::client::LoadCsv(t.substr(eq + 1), label_column, classes);
    if (!d.ok()) return Fail(d.status());
    sets.push_back({t.substr(0, eq), *std::move(d)});
  }
  fl::client::ModelArchitecture arch;
  if (!sets.empty()) {
    absl::StatusOr<fl::client::ModelKind> kind = fl::client::ParseModelKind(model_kind);
    if (!kind.ok()) return Fail(kind.status());
    arch.kind = *kind;
    arch.num_features = sets[0].data.num_features;
    arch.num_classes = classes;
    arch.hidden = hidden;
  }
  const fl::client::Dataset pooled = Pool(sets);

  absl::StatusOr<std::vector<fl::server::RoundRecord>> rounds = (*store)->Rounds(run->run_id);
  if (!rounds.ok()) return Fail(rounds.status());
  absl::StatusOr<std::vector<fl::server::EvaluationRecord>> evals =
      (*store)->Evaluations(run->run_id);
  if (!evals.ok()) return Fail(evals.status());
  std::map<int32_t, fl::server::EvaluationRecord> federated;
  for (const auto& e : *evals) {
    if (e.source == "federated") federated[e.round] = e;
  }

  std::printf("%5s %10s %9s | %9s %9s", "round", "train loss", "train acc", "eval loss",
              "eval acc");
  if (!sets.empty()) std::printf(" | %9s %9s", "test acc", "test AUC");
  std::printf("\n");
  int committed = 0;
  std::optional<double> last_fed_accuracy;
  const fl::server::RoundRecord* last = nullptr;
  for (const fl::server::RoundRecord& r : *rounds) {
    if (r.status != fl::server::RoundStatus::kCommitted) continue;
    ++committed;
    last = &r;
    const std::map<std::string, double> m = ParseMetrics(r.metrics_json);
    std::string eval_loss = "-", eval_acc = "-";
    if (auto it = federated.find(r.round); it != federated.end()) {
      eval_loss = absl::StrFormat("%.4f", it->second.loss);
      eval_acc = absl::StrFormat("%.4f", it->second.accuracy);
      last_fed_accuracy = it->second.accuracy;
    }
    std::printf("%5d %10s %9s | %9s %9s", r.round, Cell(m, "train_loss").c_str(),
                Cell(m, "train_accuracy").c_str(), eval_loss.c_str(), eval_acc.c_str());
    if (!sets.empty()) {
      absl::StatusOr<fl::Model> model = (*store)->ReadCheckpoint(r.checkpoint);
      if (!model.ok()) return Fail(model.status());
      absl::StatusOr<fl::client::EvalResult> e =
          fl::client::EvaluateBuiltinModel(arch, *model, pooled, "cpu");
      if (!e.ok()) return Fail(e.status());
      std::printf(" | %9s %9s", Cell(e->metrics, "accuracy").c_str(),
                  Cell(e->metrics, "auc").c_str());
    }
    std::printf("\n");
  }

  std::printf("\nRun %lld '%s': %s, %d rounds committed%s%s\n", static_cast<long long>(run->run_id),
              run->name.c_str(), ToString(run->status), committed, run->reason.empty() ? "" : ": ",
              run->reason.c_str());
  std::string final_line =
      absl::StrCat("final: status=", ToString(run->status), " rounds=", committed);
  if (last_fed_accuracy) {
    absl::StrAppend(&final_line, absl::StrFormat(" fed_accuracy=%.4f", *last_fed_accuracy));
  }
  if (last != nullptr && !sets.empty()) {
    absl::StatusOr<fl::Model> model = (*store)->ReadCheckpoint(last->checkpoint);
    if (!model.ok()) return Fail(model.status());
    std::printf("The final model on each site's test data:\n%-10s %7s %8s %9s %9s\n", "site",
                "rows", "positive", "accuracy", "AUC");
    for (const TestSet& s : sets) {
      absl::StatusOr<fl::client::EvalResult> e =
          fl::client::EvaluateBuiltinModel(arch, *model, s.data, "cpu");
      if (!e.ok()) return Fail(e.status());
      int64_t positive = 0;
      for (int32_t y : s.data.labels) positive += y == 1 ? 1 : 0;
      std::printf("%-10s %7lld %8lld %9s %9s\n", s.name.c_str(),
                  static_cast<long long>(s.data.num_examples()), static_cast<long long>(positive),
                  Cell(e->metrics, "accuracy").c_str(), Cell(e->metrics, "auc").c_str());
    }
    absl::StatusOr<fl::client::EvalResult> e =
        fl::client::EvaluateBuiltinModel(arch, *model, pooled, "cpu");
    if (!e.ok()) return Fail(e.status());
    std::printf("%-10s %7lld %8s %9s %9s\n", "all", static_cast<long long>(pooled.num_examples()),
                "", Cell(e->metrics, "accuracy").c_str(), Cell(e->metrics, "auc").c_str());
    absl::StrAppend(&final_line, " accuracy=", Cell(e->metrics, "accuracy"),
                    " auc=", Cell(e->metrics, "auc"));
  }
  std::printf("%s\n", final_line.c_str());
  return run->status == fl::server::RunStatus::kFinished ? 0 : 1;
}
