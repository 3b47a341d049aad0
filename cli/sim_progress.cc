#include "cli/sim_progress.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fl::cli {
namespace {

std::string Clock(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

SimProgress::SimProgress(std::FILE* out, bool bar, int32_t rounds, bool dp)
    : out_(out), bar_(bar), rounds_(rounds), dp_(dp) {}

void SimProgress::Setup(const std::string& step) {
  ClearBar();
  std::fprintf(out_, "[%6.1f s] %s\n", absl::ToDoubleSeconds(absl::Now() - start_), step.c_str());
  std::fflush(out_);
}

void SimProgress::Partition(const simulation::PartitionSummary& summary) {
  ClearBar();
  std::fprintf(out_, "\nPartition:\n%s\n", simulation::FormatPartitionSummary(summary).c_str());
  std::fflush(out_);
}

void SimProgress::Header() {
  if (header_printed_) return;
  header_printed_ = true;
  std::fprintf(out_, "%6s %9s %11s %10s %9s%s\n", "round", "clients", "train loss", "test acc",
               "time", dp_ ? absl::StrFormat(" %9s", "epsilon").c_str() : "");
}

void SimProgress::Round(const simulation::SimulationRound& round) {
  ClearBar();
  Header();
  const server::RoundSummary& r = round.summary;
  auto metric = [&](const char* name) {
    auto it = r.metrics.find(name);
    return it == r.metrics.end() ? std::string("-") : absl::StrFormat("%.4f", it->second);
  };
  std::string epsilon;
  if (dp_) {
    epsilon =
        r.committed ? absl::StrFormat(" %9.4f", round.dp_epsilon) : absl::StrFormat(" %9s", "-");
  }
  std::fprintf(out_, "%6d %4d/%-4d %11s %10s %8.2fs%s%s\n", r.round, r.num_accepted, r.num_sampled,
               metric("train_loss").c_str(), metric("test_accuracy").c_str(),
               absl::ToDoubleSeconds(round.wall_time), epsilon.c_str(),
               r.committed ? "" : absl::StrCat("  FAILED: ", r.reason).c_str());
  if (r.committed) {
    ++committed_;
    if (auto it = r.metrics.find("test_accuracy"); it != r.metrics.end()) {
      last_accuracy_ = it->second;
    }
  }
  DrawBar();
  std::fflush(out_);
}

void SimProgress::Finish() {
  ClearBar();
  std::fflush(out_);
}

void SimProgress::ClearBar() {
  if (!bar_shown_) return;
  std::fputs("\r\033[2K", out_);  // carriage return, erase the line
  bar_shown_ = false;
}

void SimProgress::DrawBar() {
  if (!bar_ || rounds_ <= 0) return;
  constexpr int kWidth = 30;
  const int32_t done = std::min(committed_, rounds_);
  const int filled = static_cast<int>(static_cast<int64_t>(kWidth) * done / rounds_);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - training_start_);
  const std::string eta = done > 0 ? Clock(elapsed / done * (rounds_ - done)) : std::string("?");
  std::fprintf(
      out_, "[%s%s] %d/%d rounds  %s elapsed  ETA %s%s", std::string(filled, '#').c_str(),
      std::string(kWidth - filled, '.').c_str(), done, rounds_, Clock(elapsed).c_str(), eta.c_str(),
      last_accuracy_ >= 0 ? absl::StrFormat("  test acc %.4f", last_accuracy_).c_str() : "");
  bar_shown_ = true;
}

}  // namespace fl::cli
