// The data of a simulation (sim_setup.h): Fashion-MNIST, a CSV file or FedProx's Synthetic, the
// server's test set, and the split of the training rows among the sites.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "fl/client/dataset.h"
#include "fl/common/random.h"
#include "simulation/internal/sim_setup.h"

namespace fl::simulation::internal {
namespace {

// Sites when num_clients is 0 and the data has no split of its own.
constexpr int32_t kDefaultSites = 10;

// Splits `all` into (train, test) rows: `test_fraction` of the rows, drawn by a seeded shuffle,
// are the test set; both keep the file's order.
void HoldOut(int64_t num_rows, double test_fraction, uint64_t seed, std::vector<int64_t>& train,
             std::vector<int64_t>& test) {
  std::vector<int64_t> order(static_cast<size_t>(num_rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(seed ^ 0x7e57'5e7ULL);
  Shuffle(order, rng);
  const auto num_test = static_cast<size_t>(std::llround(test_fraction * num_rows));
  test.assign(order.begin(), order.begin() + static_cast<ptrdiff_t>(num_test));
  train.assign(order.begin() + static_cast<ptrdiff_t>(num_test), order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());
}

absl::Status LoadFashionMnist(const SimulationOptions& o, SimulationData& data) {
  absl::StatusOr<client::Dataset> train = client::LoadIdx(
      o.dataset_dir + "/train-images-idx3-ubyte.gz", o.dataset_dir + "/train-labels-idx1-ubyte.gz");
  if (!train.ok()) return train.status();
  absl::StatusOr<client::Dataset> test = client::LoadIdx(
      o.dataset_dir + "/t10k-images-idx3-ubyte.gz", o.dataset_dir + "/t10k-labels-idx1-ubyte.gz");
  if (!test.ok()) return test.status();
  data.train = std::make_shared<const client::Dataset>(*std::move(train));
  data.test = std::make_shared<const client::Dataset>(*std::move(test));
  data.description = absl::StrCat("Fashion-MNIST (", o.dataset_dir, ")");
  return absl::OkStatus();
}

absl::Status LoadCsvData(const SimulationOptions& o, SimulationData& data) {
  if (o.csv_path.empty()) {
    return absl::InvalidArgumentError("data 'csv' needs csv_path (--csv FILE)");
  }
  absl::StatusOr<client::Dataset> all = client::LoadCsv(o.csv_path, o.csv);
  if (!all.ok()) return all.status();
  if (!o.test_csv_path.empty()) {
    client::CsvOptions test_options = o.csv;
    test_options.key_column.clear();
    test_options.num_classes = all->num_classes;
    test_options.feature_columns = all->feature_names;  // the same features, in the same order
    absl::StatusOr<client::Dataset> test = client::LoadCsv(o.test_csv_path, test_options);
    if (!test.ok()) return test.status();
    data.train = std::make_shared<const client::Dataset>(*std::move(all));
    data.test = std::make_shared<const client::Dataset>(*std::move(test));
  } else {
    std::vector<int64_t> train_rows;
    std::vector<int64_t> test_rows;
    HoldOut(all->num_examples(), o.test_fraction, o.seed, train_rows, test_rows);
    if (train_rows.empty() || test_rows.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.csv_path, ": ", all->num_examples(), " rows leave no ",
                       train_rows.empty() ? "training" : "test", " rows at test_fraction ",
                       o.test_fraction, "; give a test file (--test-csv) or more rows"));
    }
    data.train = std::make_shared<const client::Dataset>(all->Subset(train_rows));
    data.test = std::make_shared<const client::Dataset>(all->Subset(test_rows));
  }
  data.description =
      absl::StrCat("CSV ", o.csv_path, " (", data.train->num_examples(), " training rows, ",
                   data.train->num_features, " features, ", data.train->num_classes, " classes)");
  return absl::OkStatus();
}

absl::Status MakeSyntheticData(const SimulationOptions& o, SimulationData& data) {
  SyntheticOptions synthetic = o.synthetic;
  synthetic.num_devices = o.num_clients > 0 ? o.num_clients : 30;
  synthetic.seed = o.seed;
  absl::StatusOr<std::vector<SyntheticDevice>> devices = GenerateSynthetic(synthetic);
  if (!devices.ok()) return devices.status();
  SyntheticDataset flat = FlattenSynthetic(*devices);
  client::Dataset all;
  all.num_features = flat.num_features;
  all.num_classes = flat.num_classes;
  all.features = std::move(flat.features);
  all.labels = std::move(flat.labels);
  // Each device keeps the first (1 - test_fraction) of its rows (at least one); the rest of
  // every device's rows is the server's test set.
  std::vector<int64_t> train_rows;
  std::vector<int64_t> test_rows;
  Partition natural;
  for (const std::vector<int64_t>& rows : flat.partition) {
    const auto keep = static_cast<size_t>(std::max<int64_t>(
        1, std::llround((1 - o.test_fraction) * static_cast<double>(rows.size()))));
    std::vector<int64_t>& mine = natural.emplace_back();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i < keep) {
        mine.push_back(static_cast<int64_t>(train_rows.size()));
        train_rows.push_back(rows[i]);
      } else {
        test_rows.push_back(rows[i]);
      }
    }
  }
  if (test_rows.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data: test_fraction ", o.test_fraction, " leaves no test rows"));
  }
  data.train = std::make_shared<const client::Dataset>(all.Subset(train_rows));
  data.test = std::make_shared<const client::Dataset>(all.Subset(test_rows));
  data.natural = std::move(natural);
  data.description =
      absl::StrCat("Synthetic(", synthetic.alpha, ", ", synthetic.beta, ")",
                   synthetic.iid ? " IID" : "", ", ", synthetic.num_devices, " devices");
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadSimulationData(const SimulationOptions& o, SimulationData& data) {
  if (o.data != "fashion-mnist" && o.data != "csv" && o.data != "synthetic") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data '", o.data, "'; choose fashion-mnist, csv or synthetic"));
  }
  if (o.data != "csv" &&
      (!o.csv_path.empty() || !o.test_csv_path.empty() || !o.csv.key_column.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CSV file, test file or key column is set but the data is '", o.data,
                     "': set data.source = \"csv\" (--data csv, or give the file with --csv)"));
  }
  if (!(o.test_fraction > 0 && o.test_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("test_fraction must be in (0, 1), got ", o.test_fraction));
  }
  if (o.data == "csv") return LoadCsvData(o, data);
  if (o.data == "synthetic") return MakeSyntheticData(o, data);
  return LoadFashionMnist(o, data);  // the only other name the first check lets through
}

absl::Status PartitionSimulationData(const SimulationOptions& o, SimulationData& data) {
  const bool has_natural = data.natural.has_value() || !data.train->keys.empty();
  const std::string name = PartitionNameFor(o);
  data.partition_name = name;
  if (name == "natural") {
    if (!has_natural) {
      return absl::InvalidArgumentError(
          "partition 'natural' needs data with a split of its own: a CSV key column "
          "(--key-column COLUMN, data.key_column) or synthetic data");
    }
    if (data.natural.has_value()) {
      data.parts = *data.natural;
    } else {
      absl::StatusOr<Partition> parts = PartitionByColumn(data.train->keys);
      if (!parts.ok()) return parts.status();
      data.parts = *std::move(parts);
    }
    if (o.num_clients > 0 && static_cast<size_t>(o.num_clients) != data.parts.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the natural split has ", data.parts.size(), " sites but num_clients is ",
                       o.num_clients, ": set --clients ", data.parts.size(), " (or 0)"));
    }
  } else {
    const int32_t num_clients = o.num_clients > 0 ? o.num_clients : kDefaultSites;
    PartitionSpec spec = o.partition;
    spec.name = name;
    spec.seed = o.seed;
    spec.examples_per_party = o.max_examples_per_client;
    if (name == "sampled" && spec.examples_per_party == 0) {
      return absl::InvalidArgumentError(
          "partition 'sampled' needs the number of rows each site draws: set "
          "--examples-per-client (data.examples_per_site)");
    }
    absl::StatusOr<Partition> parts =
        MakePartition(spec, data.train->labels, data.train->num_classes, num_clients);
    if (!parts.ok()) return parts.status();
    data.parts = *std::move(parts);
  }
  if (o.max_examples_per_client > 0) {
    for (std::vector<int64_t>& part : data.parts) {
      if (static_cast<int64_t>(part.size()) > o.max_examples_per_client) {
        part.resize(static_cast<size_t>(o.max_examples_per_client));
      }
    }
  }
  for (size_t i = 0; i < data.parts.size(); ++i) {
    if (data.parts[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("partition '", name, "' gives site ", i,
                                                     " no examples: use fewer sites or another ",
                                                     "partition"));
    }
  }
  absl::StatusOr<PartitionSummary> summary =
      SummarizePartition(data.parts, data.train->labels, data.train->num_classes);
  if (!summary.ok()) return summary.status();
  data.summary = *std::move(summary);
  return absl::OkStatus();
}

}  // namespace fl::simulation::internal

namespace fl::simulation {

std::string PartitionNameFor(const SimulationOptions& o) {
  if (o.partition.name == "column") return "natural";
  if (!o.partition.name.empty()) return o.partition.name;
  const bool has_natural = o.data == "synthetic" || (o.data == "csv" && !o.csv.key_column.empty());
  return has_natural ? "natural" : "iid";
}

}  // namespace fl::simulation
