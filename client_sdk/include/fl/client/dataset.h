// In-memory datasets for the built-in trainers and the loaders that fill them.
//
// A Dataset is a dense row-major matrix of float32 features with one integer label per row.
// Loaders refuse bad input before anything is trained or sent, naming the file, and for CSV the
// row and column, in an INVALID_ARGUMENT status.
#ifndef FL_CLIENT_DATASET_H_
#define FL_CLIENT_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fl::client {

struct Dataset {
  int64_t num_features = 0;
  int32_t num_classes = 0;      // labels are in [0, num_classes)
  std::vector<float> features;  // num_examples() x num_features, row-major
  std::vector<int32_t> labels;  // num_examples()

  int64_t num_examples() const { return static_cast<int64_t>(labels.size()); }
  const float* row(int64_t i) const { return features.data() + i * num_features; }
  // The rows at `indices`, in that order (indices must be in range).
  Dataset Subset(const std::vector<int64_t>& indices) const;
};

// Reads an IDX image file (magic 0x00000803, uint8 pixels) and an IDX label file (0x00000801),
// either of them optionally gzip-compressed (".gz"). Pixels are scaled to [0, 1]; each image is
// flattened into one row. num_classes is 1 + the largest label. Refuses a wrong magic number,
// truncated data, or a count that differs between the two files, naming the file. When
// `num_classes` > 0 the dataset has that many classes and a label outside [0, num_classes) is
// refused, naming the label file and the 0-based item.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                                int32_t num_classes = 0);

// Reads a CSV file with a header row. `label_column` names the column holding integer class
// labels (0..K-1); every other column is a numeric feature. Refuses a missing label column,
// a non-numeric value, NaN or infinity, a row with the wrong number of fields, or a negative or
// non-integer label, naming the file, the 1-based row and the column. When `num_classes` > 0
// the dataset has that many classes and a label >= num_classes is refused the same way.
absl::StatusOr<Dataset> LoadCsv(const std::string& path, std::string_view label_column,
                                int32_t num_classes = 0);

}  // namespace fl::client

#endif  // FL_CLIENT_DATASET_H_
