// A float64 weighted-sum accumulator that many threads add to at once: it locks in stripes of
// 256 Ki parameters (1 MiB of float32 updates, 2 MiB of the sum),
// so updates folding different parts of the model do not wait for each other. Shared by the
// streaming strategies (FedAvg, SCAFFOLD, q-FedAvg, the server optimizers).
//
// Its memory is laid out so that the server holds at most the global model and this sum (3x the
// model) in a round: the sum lives in its own mapping (PageBuffer), and TakeModel builds the next
// global model stripe by stripe while handing each stripe of the sum back to the system, so the
// result and the sum are never resident in full at once.
//
// A fresh sum would take one page fault per 4 KiB on its first write, inside the fold of the
// first update (measured: 80 % of the fold's time for a 1 GiB model); a thread faults it in while
// the round's sites download and train, so folds run at memory speed.
#ifndef FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_
#define FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <span>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fl/common/model.h"
#include "fl/common/page_buffer.h"

namespace fl::aggregation::internal {

class StripedSum {
 public:
  static constexpr int64_t kStripeFloats = kMaxChunkBytes / static_cast<int64_t>(sizeof(float));

  // A zero sum over a model of `spec` (which must be valid).
  explicit StripedSum(ModelSpec spec)
      : spec_(std::move(spec)),
        size_(spec_.NumFloats()),
        sum_(static_cast<size_t>(size_) * sizeof(double)),
        stripes_(static_cast<size_t>((size_ + kStripeFloats - 1) / kStripeFloats)) {
    if (sum_.size() >= kPopulateInBackgroundBytes) {
      try {
        populate_ = std::thread([this] { PopulateUntilStopped(); });
      } catch (const std::system_error&) {
        // No thread to be had: the folds fault the sum in themselves, as they always could.
      }
    }
  }
  ~StripedSum() { JoinPopulate(); }
  StripedSum(const StripedSum&) = delete;
  StripedSum& operator=(const StripedSum&) = delete;

  // sum[offset + i] += weight * values[i], holding each stripe's lock in turn. Thread-safe; the
  // range must lie inside the sum, and TakeModel must not have been called.
  void Add(int64_t offset, std::span<const float> values, double weight) {
    const int64_t end = offset + static_cast<int64_t>(values.size());
    for (int64_t pos = offset; pos < end;) {
      const int64_t stripe = pos / kStripeFloats;
      const int64_t stop = std::min(end, (stripe + 1) * kStripeFloats);
      std::lock_guard<std::mutex> lock(stripes_[static_cast<size_t>(stripe)]);
      double* sum = sums() + pos;
      const float* x = values.data() + (pos - offset);
      for (int64_t i = 0; i < stop - pos; ++i) sum[i] += weight * static_cast<double>(x[i]);
      pos = stop;
    }
  }

  // The sum at `index`; read only after every Add has returned, before TakeModel.
  double at(int64_t index) const { return sums()[index]; }
  int64_t size() const { return size_; }

  // The model whose parameter i is f(i, sum[i]). Each stripe of the sum is handed back to the
  // system once it is written out, so the sum is spent afterwards: call once, after every Add
  // returned. FAILED_PRECONDITION naming `what` and the first parameter whose value is not
  // finite: "<what> is not finite at parameter i (...)".
  //
  // A model of 2 * kStripesPerThread stripes or more (2M parameters) is built by several threads
  // (up to kMaxFinishThreads), each taking the next stripe in turn, so that a rule with a square
  // root and a division per parameter (a server optimizer's) is not held to one core. `f` is
  // therefore called from several threads at once, each i once: it may write state of its own
  // parameter only.
  template <typename F>
  absl::StatusOr<Model> TakeModel(const char* what, F&& f) {
    if (taken_) return absl::FailedPreconditionError(absl::StrCat(what, ": the sum was spent"));
    taken_ = true;
    JoinPopulate();  // stopped: it must not fault released stripes back in
    Model out(spec_);
    std::span<float> data = out.data();
    const double* sum = sums();
    const int64_t stripes = (size_ + kStripeFloats - 1) / kStripeFloats;
    std::atomic<int64_t> next_stripe{0};
    std::atomic<int64_t> first_bad{size_};  // the lowest parameter found not finite
    auto work = [&] {
      for (int64_t s = next_stripe++; s < stripes; s = next_stripe++) {
        const int64_t begin = s * kStripeFloats;
        const int64_t stop = std::min(size_, begin + kStripeFloats);
        for (int64_t i = begin; i < stop; ++i) {
          const double d = f(i, sum[i]);
          // Checked as a double: casting one beyond float's range to float is undefined.
          if (!(std::fabs(d) <= static_cast<double>(std::numeric_limits<float>::max()))) {
            int64_t seen = first_bad.load();
            while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
            }
            break;
          }
          data[static_cast<size_t>(i)] = static_cast<float>(d);
        }
        sum_.Release(static_cast<size_t>(begin) * sizeof(double),
                     static_cast<size_t>(stop - begin) * sizeof(double));
      }
    };
    std::vector<std::thread> helpers;
    const int64_t wanted = std::min<int64_t>(FinishThreads(), stripes / kStripesPerThread);
    try {
      helpers.reserve(static_cast<size_t>(std::max<int64_t>(0, wanted - 1)));
      for (int64_t t = 1; t < wanted; ++t) helpers.emplace_back(work);
    } catch (...) {
      // No more threads (or memory for one) to be had: those started and this one do it all.
    }
    work();
    for (std::thread& t : helpers) t.join();
    if (const int64_t bad = first_bad.load(); bad < size_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " is not finite at parameter ", bad,
                       " (the updates' weights or values are too large)"));
    }
    return out;
  }

 private:
  // TakeModel's threads: the machine's cores, at most kMaxFinishThreads, and one per
  // kStripesPerThread stripes (a small model is not worth a thread's start).
  static constexpr int64_t kMaxFinishThreads = 8;
  static constexpr int64_t kStripesPerThread = 4;
  static int64_t FinishThreads() {
    return std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxFinishThreads);
  }
  // Smaller sums fault in quickly enough on their own.
  static constexpr size_t kPopulateInBackgroundBytes = size_t{64} << 20;
  static constexpr size_t kPopulateSlice = size_t{64} << 20;

  // Faults the sum in, a slice at a time, until done or told to stop (a round aborted early
  // must not wait for gigabytes it will never use).
  void PopulateUntilStopped() {
    for (size_t off = 0; off < sum_.size() && !stop_populating_.load(); off += kPopulateSlice) {
      sum_.Populate(off, kPopulateSlice);
    }
  }
  void JoinPopulate() {
    stop_populating_ = true;
    if (populate_.joinable()) populate_.join();
  }
  double* sums() const { return static_cast<double*>(sum_.data()); }

  const ModelSpec spec_;
  const int64_t size_;
  PageBuffer sum_;
  std::vector<std::mutex> stripes_;
  bool taken_ = false;
  std::atomic<bool> stop_populating_{false};
  std::thread populate_;  // declared last: started once the members it uses exist
};

}  // namespace fl::aggregation::internal

#endif  // FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_
