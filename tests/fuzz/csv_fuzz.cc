// Fuzz target for the CSV loader of a site's data (fl::client::LoadCsv, fl/client/dataset.h, with
// its record layer client_sdk/src/csv_reader.h): quoting, delimiters, column selection, missing
// values and numbers.
//
// Input: two option bytes, then the file's text (written to a temporary file: LoadCsv takes a
// path).
//   options[0]: bits 0-2 the delimiter (',', ';', tab, '|', ':', '#', and two that are refused:
//     ' ' and '"'); bits 3-4 missing values (refuse, drop_row, impute 0.5, refuse); 0x20
//     drop_columns = {"id"}; 0x40 feature_columns = {"b", "a"}; 0x80 key_column = "site".
//   options[1]: bits 0-3 num_classes (0: from the labels); 0x80 the label column is "y" (else
//     "label").
// Any file gives INVALID_ARGUMENT, saying why, or a dataset, and a dataset is consistent: a
// row of num_features finite values and a label in [0, num_classes) per example, the feature
// names (exactly feature_columns when given; never the label, a dropped or the key column), a
// key per row exactly when key_column is set, imputed values only when imputing.
//
// Compiled into the executable with the sanitizers: client_sdk/src/csv.cc and
// client_sdk/src/csv_reader.cc.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fl/client/dataset.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

client::CsvOptions OptionsFrom(uint8_t a, uint8_t b) {
  static constexpr char kDelimiters[] = {',', ';', '\t', '|', ':', '#', ' ', '"'};
  client::CsvOptions o;
  o.delimiter = kDelimiters[a & 0x07];
  switch ((a >> 3) & 0x03) {
    case 1:
      o.missing_values = client::MissingValues::kDropRow;
      break;
    case 2:
      o.missing_values = client::MissingValues::kImpute;
      o.impute_value = 0.5f;
      break;
    default:
      o.missing_values = client::MissingValues::kRefuse;
      break;
  }
  if ((a & 0x20) != 0) o.drop_columns = {"id"};
  if ((a & 0x40) != 0) o.feature_columns = {"b", "a"};
  if ((a & 0x80) != 0) o.key_column = "site";
  o.num_classes = b & 0x0f;
  if ((b & 0x80) != 0) o.label_column = "y";
  return o;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void CheckDataset(const client::Dataset& d, const client::CsvOptions& o) {
  Check(d.num_features >= 1, "a dataset has features");
  Check(d.num_examples() >= 1, "a dataset has rows");
  Check(d.features.size() == static_cast<size_t>(d.num_examples() * d.num_features),
        "a row of features per example");
  Check(d.feature_names.size() == static_cast<size_t>(d.num_features), "a name per feature");
  Check(d.num_classes >= 1 && (o.num_classes == 0 || d.num_classes == o.num_classes),
        "the classes are the options' or the labels'");
  for (int32_t label : d.labels) Check(label >= 0 && label < d.num_classes, "labels are classes");
  for (float v : d.features) Check(std::isfinite(v), "features are finite");
  if (!o.feature_columns.empty()) {
    Check(d.feature_names == o.feature_columns, "feature_columns are the features, in order");
  }
  Check(!Contains(d.feature_names, o.label_column), "the label is no feature");
  for (const std::string& dropped : o.drop_columns) {
    Check(!Contains(d.feature_names, dropped), "a dropped column is no feature");
  }
  if (!o.key_column.empty()) {
    Check(!Contains(d.feature_names, o.key_column), "the key is no feature");
    Check(d.keys.size() == d.labels.size(), "a key per row");
  } else {
    Check(d.keys.empty(), "no keys without a key column");
  }
  Check(d.dropped_rows >= 0, "dropped rows are counted");
  Check(d.dropped_rows == 0 || o.missing_values == client::MissingValues::kDropRow,
        "rows are dropped only under drop_row");
  Check(d.imputed_values == 0 || o.missing_values == client::MissingValues::kImpute,
        "values are imputed only under impute");
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fl::fuzz::TempFile file("data.csv");
  fl::fuzz::Reader in(data, size);
  const uint8_t a = in.U8();
  const uint8_t b = in.U8();
  const fl::client::CsvOptions options = fl::fuzz::OptionsFrom(a, b);
  absl::StatusOr<fl::client::Dataset> d = fl::client::LoadCsv(file.Write(in.Rest()), options);
  if (!d.ok()) {
    fl::fuzz::CheckRefusal(d.status(), absl::StatusCode::kInvalidArgument, "a CSV file is refused");
    fl::fuzz::Check(std::string(d.status().message()).find(file.path()) != std::string::npos,
                    "a refusal names the file");
    return 0;
  }
  fl::fuzz::CheckDataset(*d, options);
  return 0;
}
