// In-memory datasets for the built-in trainers, the loaders that fill them, and the per-feature
// statistics that tell whether the features need scaling.
//
// A Dataset is a dense row-major matrix of float32 features with one integer label per row.
// Loaders refuse bad input before anything is trained or sent, naming the file, and for CSV the
// 1-based row and the column, in an INVALID_ARGUMENT status.
//
// Thread-safety: the functions keep no state; a Dataset is a plain value.
#ifndef FL_CLIENT_DATASET_H_
#define FL_CLIENT_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::client {

struct Dataset {
  int64_t num_features = 0;
  int32_t num_classes = 0;      // labels are in [0, num_classes)
  std::vector<float> features;  // num_examples() x num_features, row-major
  std::vector<int32_t> labels;  // num_examples()
  // The CSV feature columns, in feature order (num_features names); empty for IDX data.
  std::vector<std::string> feature_names;
  // What the CSV loader did to the file's rows (see CsvOptions::missing_values): rows skipped
  // for a missing value (kDropRow) and feature values replaced by impute_value (kImpute). Both
  // describe the file loaded: 0 for IDX data and for a Subset.
  int64_t dropped_rows = 0;
  int64_t imputed_values = 0;
  // With CsvOptions::key_column: that column's text for each row (e.g. a hospital id), which a
  // simulation splits the rows by; empty otherwise.
  std::vector<std::string> keys;

  int64_t num_examples() const { return static_cast<int64_t>(labels.size()); }
  const float* row(int64_t i) const { return features.data() + i * num_features; }
  // The rows at `indices`, in that order (indices must be in range), with the same feature
  // names and classes (and their keys, when there are keys).
  Dataset Subset(const std::vector<int64_t>& indices) const;
};

// An IID split of `num_examples` rows into `num_parts` near-equal parts: a shuffle seeded by
// `seed`, then numpy.array_split (the first num_examples % num_parts parts are one row longer).
// Every index is in exactly one part. A site takes its shard of a shared file with it (`fl client
// --shard`); fl::simulation's "iid" partitioner is this split. INVALID_ARGUMENT unless
// 1 <= num_parts <= num_examples.
absl::StatusOr<std::vector<std::vector<int64_t>>> SplitIid(int64_t num_examples, int32_t num_parts,
                                                           uint64_t seed);

// Reads an IDX image file (magic 0x00000803, uint8 pixels) and an IDX label file (0x00000801),
// either of them optionally gzip-compressed (".gz"). Pixels are scaled to [0, 1]; each image is
// flattened into one row. num_classes is 1 + the largest label. Refuses a wrong magic number,
// truncated data, or a count that differs between the two files, naming the file. When
// `num_classes` > 0 the dataset has that many classes and a label outside [0, num_classes) is
// refused, naming the label file and the 0-based item.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                                int32_t num_classes = 0);

// What a CSV value that is missing does to its row.
enum class MissingValues {
  kRefuse,   // INVALID_ARGUMENT naming the file, row and column (the default)
  kDropRow,  // the row is skipped and counted in Dataset::dropped_rows
  kImpute,   // a missing feature becomes CsvOptions::impute_value (Dataset::imputed_values)
};

// How LoadCsv reads a file. A value is *missing* when, after trimming spaces (and unquoting), it
// is empty or one of NA, N/A, NaN, null, ? in any letter case. A missing label is refused under
// every policy but kDropRow (a class is never imputed). Other NaN spellings and infinities are
// always refused.
struct CsvOptions {
  std::string label_column = "label";  // integer class labels 0..K-1
  // The field separator: ',' (default), ';', '\t', '|' or another ASCII punctuation character.
  // Refused: a double quote (it quotes fields), CR, LF, NUL, a space, a digit, a letter, '.',
  // '+', '-' (parts of numbers) and non-ASCII bytes.
  char delimiter = ',';
  // Columns never used as features (patient ids, dates, free text). Their values are not read.
  std::vector<std::string> drop_columns;
  // When not empty: exactly these columns, in this order, are the features; every other column
  // but the label is ignored (not read). When empty: every column but the label and
  // drop_columns is a feature, in file order.
  std::vector<std::string> feature_columns;
  // When not empty: a column read as text into Dataset::keys, one per row, never a feature (a
  // natural split's key, e.g. a hospital id). A row without a key counts as a missing value.
  std::string key_column;
  MissingValues missing_values = MissingValues::kRefuse;
  float impute_value = 0;  // kImpute only; must be finite
  // > 0: the dataset has this many classes and a label >= num_classes is refused. 0: 1 + the
  // largest label.
  int32_t num_classes = 0;
};

// OK when `options` can be used on any file: a usable delimiter, a non-empty label column not
// named in drop_columns or feature_columns, no column in both lists or twice in feature_columns,
// a finite impute_value, num_classes >= 0. Else INVALID_ARGUMENT naming the option.
absl::Status ValidateCsvOptions(const CsvOptions& options);

// Reads a CSV file with a header row (RFC 4180 quoting: a field in double quotes may hold the
// delimiter, line breaks and doubled quotes ""; spaces around fields are trimmed; a UTF-8 byte
// order mark, CRLF line endings and blank lines are accepted). Refuses, with INVALID_ARGUMENT
// naming the file, the 1-based row (the line where the record starts; the header is row 1) and
// the column: what ValidateCsvOptions refuses; a header without the label column (listing the
// header's columns); a column of drop_columns or feature_columns the header lacks (naming it,
// listing the header's columns); a feature or label column named twice in the header, or a
// feature column with an empty name; a header of one column (with a hint when it looks
// separated by another delimiter: "has 1 column; it looks ';'-separated: set data.delimiter");
// no feature columns; a row with the wrong number of fields; an unterminated quote; a feature
// value that is not a number, NaN, infinite or out of float32 range; a label that is not a
// non-negative integer or is >= options.num_classes; a missing value under kRefuse; no data rows
// (none left after kDropRow). NOT_FOUND when the file cannot be opened, DATA_LOSS on a read
// error. On success feature_names holds the feature columns in order.
absl::StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& options);

// LoadCsv with default CsvOptions but `label_column` and `num_classes`: every column but the
// label is a feature, ',' separates fields, a missing value is refused.
absl::StatusOr<Dataset> LoadCsv(const std::string& path, std::string_view label_column,
                                int32_t num_classes = 0);

// Hex SHA-256 (64 lowercase characters) of a feature schema: the names and their order. The
// hashed bytes are the number of names as an 8-byte big-endian integer, then for each name its
// byte length as an 8-byte big-endian integer followed by its bytes, so that no two lists share
// an encoding. Sites whose hashes are equal name the same features in the same order. IDX data
// has no names: its hash is that of the empty list, so compare num_features as well.
std::string FeatureSchemaSha256(const std::vector<std::string>& feature_names);
inline std::string FeatureSchemaSha256(const Dataset& data) {
  return FeatureSchemaSha256(data.feature_names);
}

// Per-feature sums of one dataset, in double: what a site can share so that the statistics of
// several sites' data are those of their union (Add the sums, then StatsFromSums). Note that
// sum_sq - sum^2/count loses precision when a feature's mean is large against its spread
// (|mean| / stddev beyond ~1e6); the variance is then clamped at 0.
struct FeatureSums {
  int64_t count = 0;           // rows
  std::vector<double> sum;     // per feature: sum of the values
  std::vector<double> sum_sq;  // per feature: sum of the squared values

  // Adds `other` (another dataset's sums) into these. An empty FeatureSums (count 0, no
  // features) takes other's feature count; adding an empty one changes nothing. INVALID_ARGUMENT
  // when the feature counts differ or sum and sum_sq differ in length; the sums are then unchanged.
  absl::Status Add(const FeatureSums& other);
};

FeatureSums ComputeFeatureSums(const Dataset& data);

// Per-feature mean and population standard deviation (divided by count, as scikit-learn's
// StandardScaler).
struct ColumnStats {
  std::vector<double> mean;
  std::vector<double> stddev;
};

// The statistics that `sums` describe. INVALID_ARGUMENT when count < 1 or sum and sum_sq differ
// in length.
absl::StatusOr<ColumnStats> StatsFromSums(const FeatureSums& sums);

// The statistics of `data`'s features; INVALID_ARGUMENT when it has no rows.
absl::StatusOr<ColumnStats> DescribeColumns(const Dataset& data);

// The features that look unscaled for the built-in models (SGD with one learning rate for all
// features): those whose |mean| or stddev exceeds `threshold`. Each is named by its
// feature_names entry, or "feature <i>" (0-based) when the dataset has none; in feature order.
// `stats` must be `data`'s (one entry per feature).
std::vector<std::string> UnscaledFeatures(const Dataset& data, const ColumnStats& stats,
                                          double threshold = 10);

// Replaces each feature value x of column j by (x - mean[j]) / stddev[j]; a column whose stddev
// is 0 is centered only. Pass the same statistics at every site (e.g. from the
// federation's added FeatureSums) so that all sites' features mean the same. INVALID_ARGUMENT
// when mean or stddev does not have one entry per feature, or an entry is not finite or
// stddev < 0; the data is then unchanged.
absl::Status Standardize(Dataset& data, const std::vector<double>& mean,
                         const std::vector<double>& stddev);

}  // namespace fl::client

#endif  // FL_CLIENT_DATASET_H_
