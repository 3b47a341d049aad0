// SummarizePartition and FormatPartitionSummary (declared in fl/simulation/partition.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fl/simulation/partition.h"

namespace fl::simulation {
namespace {

constexpr int64_t kMaxBuckets = 10;
constexpr int64_t kMaxBarWidth = 40;

}  // namespace

absl::StatusOr<PartitionSummary> SummarizePartition(const Partition& partition,
                                                    const std::vector<int32_t>& labels,
                                                    int32_t num_classes) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_classes must be >= 1, not ", num_classes));
  }
  PartitionSummary summary;
  summary.num_classes = num_classes;
  summary.num_examples = static_cast<int64_t>(labels.size());
  summary.parties.reserve(partition.size());
  std::vector<int32_t> times_assigned(labels.size(), 0);
  for (size_t p = 0; p < partition.size(); ++p) {
    PartySummary party;
    party.num_examples = static_cast<int64_t>(partition[p].size());
    party.class_counts.assign(static_cast<size_t>(num_classes), 0);
    for (int64_t i : partition[p]) {
      if (i < 0 || i >= summary.num_examples) {
        return absl::InvalidArgumentError(absl::StrCat("index ", i, " of party ", p,
                                                       " is outside [0, ", summary.num_examples,
                                                       ") (the number of labels)"));
      }
      const int32_t y = labels[static_cast<size_t>(i)];
      if (y < 0 || y >= num_classes) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", y, " at index ", i, " is outside [0, ", num_classes, ")"));
      }
      ++party.class_counts[static_cast<size_t>(y)];
      if (times_assigned[static_cast<size_t>(i)]++ > 0) ++summary.num_duplicated;
    }
    summary.parties.push_back(std::move(party));
  }
  summary.num_unassigned = std::count(times_assigned.begin(), times_assigned.end(), 0);
  return summary;
}

std::string FormatPartitionSummary(const PartitionSummary& summary) {
  const size_t num_parties = summary.parties.size();
  std::string out = absl::StrCat(num_parties, " parties, ", summary.num_examples, " examples");
  if (summary.num_unassigned > 0) {
    absl::StrAppend(&out, ", ", summary.num_unassigned, " unassigned");
  }
  if (summary.num_duplicated > 0) {
    absl::StrAppend(&out, ", ", summary.num_duplicated, " duplicated");
  }
  absl::StrAppend(&out, "\n");
  if (num_parties == 0) return out;

  std::vector<int64_t> sizes;
  sizes.reserve(num_parties);
  double total_classes = 0;
  for (const PartySummary& party : summary.parties) {
    sizes.push_back(party.num_examples);
    total_classes += static_cast<double>(std::count_if(
        party.class_counts.begin(), party.class_counts.end(), [](int64_t c) { return c > 0; }));
  }
  std::sort(sizes.begin(), sizes.end());
  const int64_t smallest = sizes.front();
  const int64_t largest = sizes.back();
  const double median =
      num_parties % 2 == 1
          ? static_cast<double>(sizes[num_parties / 2])
          : (static_cast<double>(sizes[num_parties / 2 - 1] + sizes[num_parties / 2])) / 2;
  absl::StrAppend(&out, "examples per party: min ", smallest, ", median ", median, ", max ",
                  largest, "\n");
  absl::StrAppendFormat(&out, "distinct classes per party: mean %.2f of %d\n",
                        total_classes / static_cast<double>(num_parties), summary.num_classes);

  // Equal-width integer buckets over [smallest, largest]; a bucket is [lo, hi], both inclusive.
  const int64_t span = largest - smallest + 1;
  const int64_t width = (span + kMaxBuckets - 1) / kMaxBuckets;
  const int64_t num_buckets = (span + width - 1) / width;
  std::vector<int64_t> counts(static_cast<size_t>(num_buckets), 0);
  for (int64_t size : sizes) ++counts[static_cast<size_t>((size - smallest) / width)];
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  const int label_width = static_cast<int>(std::to_string(largest).size());
  absl::StrAppend(&out, "party sizes:\n");
  for (int64_t b = 0; b < num_buckets; ++b) {
    const int64_t lo = smallest + b * width;
    const int64_t hi = std::min(lo + width - 1, largest);
    const int64_t count = counts[static_cast<size_t>(b)];
    // A non-empty bucket always shows at least one '#'.
    const int64_t bar = count == 0 ? 0 : std::max<int64_t>(1, count * kMaxBarWidth / most);
    absl::StrAppendFormat(&out, "  %*d-%-*d %s %d\n", label_width, lo, label_width, hi,
                          std::string(static_cast<size_t>(bar), '#'), count);
  }
  return out;
}

}  // namespace fl::simulation
