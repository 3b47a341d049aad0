// RenderHtmlReport: the page's sections, each chart's data taken from the RunReport and drawn by
// simulation/internal/report_svg.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fl/simulation/report.h"
#include "nlohmann/json.hpp"
#include "simulation/internal/report_columns.h"
#include "simulation/internal/report_svg.h"

namespace fl::simulation {
namespace {

using internal::Axes;
using internal::BarChart;
using internal::BarLayout;
using internal::BarSeries;
using internal::HtmlEscape;

constexpr char kEmDash[] = "\xE2\x80\x94";  // "—", for a missing value

constexpr char kCss[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:0 auto;"
    "max-width:980px;padding:16px}"
    "h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;"
    "border-bottom:1px solid #ddd}"
    "dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:0}"
    "dt{color:#666}dd{margin:0}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse;font-size:12px;font-variant-numeric:tabular-nums}"
    "th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;white-space:nowrap}"
    "th{background:#f4f4f4}td.text{text-align:left;white-space:normal}"
    "tr.uncommitted td{color:#999}"
    "figure{margin:18px 0}figcaption{font-size:13px;color:#444;margin-bottom:4px}"
    "svg.chart{width:100%;height:auto;max-width:720px;display:block}"
    "svg.chart text{fill:#333}"
    "p.nodata{color:#888;font-style:italic;margin:4px 0}"
    "pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:12px}"
    "footer{margin-top:28px;color:#888;font-size:12px}";

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return std::string(kEmDash);
  if (s < 60) return absl::StrFormat("%.1f s", s);
  const int64_t total = std::llround(s);
  if (total < 3600) return absl::StrFormat("%d min %02d s", total / 60, total % 60);
  return absl::StrFormat("%d h %02d min %02d s", total / 3600, total / 60 % 60, total % 60);
}

// A table's metric cell: four significant digits.
std::string Cell(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.4g", v) : std::string(kEmDash);
}

// A table's time cell: seconds with two decimals.
std::string Seconds(double s) {
  return std::isfinite(s) ? absl::StrFormat("%.2f", s) : std::string(kEmDash);
}

// Bytes in binary units, as the bytes chart counts them ("512 B", "10.5 MiB").
std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  const char* unit = "B";
  for (const char* u : {"KiB", "MiB", "GiB", "TiB"}) {
    if (v < 1024) break;
    v /= 1024;
    unit = u;
  }
  return absl::StrFormat("%.3g %s", v, unit);
}

// The figure `id`: the chart, or "no data" when `svg` is empty. `caption` is HTML.
void AppendFigure(std::string& out, const char* id, const std::string& caption,
                  const std::string& svg) {
  absl::StrAppend(&out, "<figure id=\"", id, "\">\n<figcaption>", caption, "</figcaption>\n",
                  svg.empty() ? std::string("<p class=\"nodata\">no data</p>") : svg,
                  "\n</figure>\n");
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One line per metric whose name ends in `suffix`, one point per round (its committed attempt,
// else its last attempt).
std::string MetricChart(const RunReport& report, const std::vector<std::string>& metrics,
                        std::string_view suffix, const char* y_label) {
  std::map<int32_t, const ReportRound*> chosen;
  for (const ReportRound& round : report.rounds) {
    const ReportRound*& slot = chosen[round.round];
    if (slot == nullptr || (round.committed && !slot->committed) ||
        (round.committed == slot->committed && round.attempt >= slot->attempt)) {
      slot = &round;
    }
  }
  std::vector<internal::LineSeries> series;
  for (const std::string& name : metrics) {
    if (!EndsWith(name, suffix)) continue;
    internal::LineSeries line{name, {}};
    for (const auto& [number, round] : chosen) {
      const auto it = round->metrics.find(name);
      if (it != round->metrics.end()) line.points.emplace_back(number, it->second);
    }
    series.push_back(std::move(line));
  }
  return internal::LineChartSvg(series, Axes{"round", y_label}, /*integer_x=*/true);
}

// One category per round attempt: "<round>", or "<round>#<attempt>" when the round has several.
BarChart AttemptBars(const RunReport& report, BarLayout layout, Axes axes) {
  std::map<int32_t, int> attempts;
  for (const ReportRound& round : report.rounds) ++attempts[round.round];
  BarChart chart;
  chart.layout = layout;
  chart.axes = std::move(axes);
  for (const ReportRound& round : report.rounds) {
    chart.categories.push_back(attempts[round.round] > 1
                                   ? absl::StrCat(round.round, "#", round.attempt)
                                   : absl::StrCat(round.round));
    chart.faded.push_back(!round.committed);
  }
  return chart;
}

std::string TimeChart(const RunReport& report) {
  BarChart chart = AttemptBars(report, BarLayout::kStacked, Axes{"round", "seconds"});
  for (const std::string& phase : internal::ReportPhaseNames(report)) {
    BarSeries series{phase, {}};
    for (const ReportRound& round : report.rounds) {
      const auto it = round.phase_seconds.find(phase);
      series.values.push_back(it == round.phase_seconds.end() ? NAN : it->second);
    }
    chart.series.push_back(std::move(series));
  }
  // The part of each duration that no phase accounts for, and whole durations without phases.
  BarSeries unattributed{"unattributed", {}};
  BarSeries whole{"total (no phases)", {}};
  for (const ReportRound& round : report.rounds) {
    double phases = 0;
    for (const auto& [name, s] : round.phase_seconds) phases += std::isfinite(s) ? s : 0;
    const bool split = !round.phase_seconds.empty();
    const double rest = round.duration_s - phases;
    unattributed.values.push_back(split && rest > 1e-3 ? rest : NAN);
    whole.values.push_back(split ? NAN : round.duration_s);
  }
  for (BarSeries* s : {&unattributed, &whole}) {
    if (std::any_of(s->values.begin(), s->values.end(), [](double v) { return !std::isnan(v); })) {
      chart.series.push_back(std::move(*s));
    }
  }
  return internal::BarChartSvg(chart);
}

std::string BytesChart(const RunReport& report, std::string& unit) {
  int64_t largest = 0;
  for (const ReportRound& r : report.rounds) {
    largest = std::max({largest, r.bytes_down, r.bytes_up});
  }
  if (largest <= 0) return "";
  double scale = 1;
  unit = "bytes";
  for (const char* u : {"KiB", "MiB", "GiB"}) {
    if (static_cast<double>(largest) < scale * 1024) break;
    scale *= 1024;
    unit = u;
  }
  BarChart chart = AttemptBars(report, BarLayout::kGrouped, Axes{"round", unit});
  BarSeries down{"down (to sites)", {}};
  BarSeries up{"up (from sites)", {}};
  for (const ReportRound& r : report.rounds) {
    down.values.push_back(static_cast<double>(r.bytes_down) / scale);
    up.values.push_back(static_cast<double>(r.bytes_up) / scale);
  }
  chart.series = {std::move(down), std::move(up)};
  return internal::BarChartSvg(chart);
}

void AppendHeader(std::string& out, const RunReport& report, const std::string& title) {
  const int64_t committed = std::count_if(report.rounds.begin(), report.rounds.end(),
                                          [](const ReportRound& r) { return r.committed; });
  absl::StrAppend(&out, "<header>\n<h1>", HtmlEscape(title), "</h1>\n<dl class=\"facts\">",
                  "<dt>Run</dt><dd>", report.run_id, "</dd><dt>Status</dt><dd>",
                  report.status.empty() ? kEmDash : HtmlEscape(report.status), "</dd>");
  if (!report.reason.empty()) {
    absl::StrAppend(&out, "<dt>Reason</dt><dd>", HtmlEscape(report.reason), "</dd>");
  }
  absl::StrAppend(&out, "<dt>Wall time</dt><dd>", FormatSeconds(report.wall_seconds),
                  "</dd><dt>Rounds</dt><dd>", committed, " committed of ", report.rounds.size(),
                  " attempts</dd></dl>\n</header>\n");
}

void AppendTable(std::string& out, const RunReport& report,
                 const std::vector<std::string>& metrics) {
  out += "<section id=\"results\">\n<h2>Results</h2>\n";
  if (report.rounds.empty()) {
    out += "<p class=\"nodata\">no data</p>\n</section>\n";
    return;
  }
  out +=
      "<div class=\"scroll\"><table>\n<thead><tr><th>round</th><th>attempt</th>"
      "<th>committed</th><th>sampled</th><th>accepted</th><th>time (s)</th>"
      "<th>bytes down</th><th>bytes up</th>";
  for (const std::string& name : metrics) absl::StrAppend(&out, "<th>", HtmlEscape(name), "</th>");
  out += "<th>reason</th></tr></thead>\n<tbody>\n";
  for (const ReportRound& r : report.rounds) {
    absl::StrAppend(&out, r.committed ? "<tr>" : "<tr class=\"uncommitted\">", "<td>", r.round,
                    "</td><td>", r.attempt, "</td><td>", r.committed ? "yes" : "no", "</td><td>",
                    r.num_sampled, "</td><td>", r.num_accepted, "</td><td>", Seconds(r.duration_s),
                    "</td><td>", FormatBytes(r.bytes_down), "</td><td>", FormatBytes(r.bytes_up),
                    "</td>");
    for (const std::string& name : metrics) {
      const auto it = r.metrics.find(name);
      absl::StrAppend(&out, "<td>", it == r.metrics.end() ? "" : Cell(it->second), "</td>");
    }
    absl::StrAppend(&out, "<td class=\"text\">", HtmlEscape(r.reason), "</td></tr>\n");
  }
  out += "</tbody>\n</table></div>\n</section>\n";
}

void AppendPartition(std::string& out, const RunReport& report) {
  const std::vector<ReportPartitionParty>& parties = report.partition;
  if (parties.empty()) return;
  out += "<section id=\"partition\">\n<h2>Data partition</h2>\n";
  if (!report.partition_summary_text.empty()) {
    absl::StrAppend(&out, "<pre class=\"summary\">", HtmlEscape(report.partition_summary_text),
                    "</pre>\n");
  }
  std::vector<size_t> order(parties.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&parties](size_t a, size_t b) {
    return parties[a].examples > parties[b].examples;
  });
  int64_t total = 0;
  for (const ReportPartitionParty& p : parties) total += p.examples;
  const std::string sizes = absl::StrCat(parties.size(), " parties, ", total, " examples; largest ",
                                         parties[order.front()].examples, ", median ",
                                         parties[order[order.size() / 2]].examples, ", smallest ",
                                         parties[order.back()].examples);
  if (parties.size() <= static_cast<size_t>(kReportMaxPartyBars)) {
    BarChart chart;
    chart.axes = Axes{"party (largest first)", "examples"};
    chart.integer_y = true;
    BarSeries examples{"examples", {}};
    for (size_t i : order) {
      chart.categories.push_back(absl::StrCat(i));
      examples.values.push_back(static_cast<double>(parties[i].examples));
    }
    chart.series = {std::move(examples)};
    AppendFigure(out, "plot-partition", absl::StrCat("Examples per party: ", sizes, "."),
                 internal::BarChartSvg(chart));
  } else {
    std::vector<double> values;
    for (const ReportPartitionParty& p : parties) values.push_back(static_cast<double>(p.examples));
    const int bins = std::clamp(static_cast<int>(std::ceil(std::sqrt(values.size()))), 10, 50);
    AppendFigure(out, "plot-partition",
                 absl::StrCat("Histogram of party sizes (more than ", kReportMaxPartyBars,
                              " parties): ", sizes, "."),
                 internal::HistogramSvg(values, bins, Axes{"examples per party", "parties"}));
  }
  size_t num_classes = 0;
  for (const ReportPartitionParty& p : parties)
    num_classes = std::max(num_classes, p.class_counts.size());
  const size_t drawn_parties = std::min(parties.size(), static_cast<size_t>(kReportMaxHeatParties));
  const size_t drawn_classes = std::min(num_classes, static_cast<size_t>(kReportMaxHeatClasses));
  internal::Heatmap heat;
  heat.axes = Axes{"party", "class"};
  heat.scale_label = "share of the party's examples";
  for (size_t c = 0; c < drawn_classes; ++c) heat.row_labels.push_back(absl::StrCat(c));
  heat.cells.assign(drawn_classes, std::vector<double>(drawn_parties, 0.0));
  for (size_t j = 0; j < drawn_parties; ++j) {
    const ReportPartitionParty& p = parties[order[j]];
    heat.column_labels.push_back(absl::StrCat(order[j]));
    const int64_t sum = std::accumulate(p.class_counts.begin(), p.class_counts.end(), int64_t{0});
    for (size_t c = 0; c < drawn_classes && c < p.class_counts.size() && sum > 0; ++c) {
      heat.cells[c][j] = static_cast<double>(p.class_counts[c]) / static_cast<double>(sum);
    }
  }
  std::string caption =
      "Classes per party: the share of each class in a party's examples, "
      "parties largest first";
  if (drawn_parties < parties.size()) {
    absl::StrAppend(&caption, "; only the ", drawn_parties, " largest of ", parties.size(),
                    " parties are drawn");
  }
  if (drawn_classes < num_classes) {
    absl::StrAppend(&caption, "; only the first ", drawn_classes, " of ", num_classes,
                    " classes are drawn");
  }
  AppendFigure(out, "plot-partition-classes", caption + ".",
               drawn_classes == 0 ? "" : internal::HeatmapSvg(heat));
  out += "</section>\n";
}

void AppendConfiguration(std::string& out, const RunReport& report) {
  std::string text = report.configuration_json;
  const nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) {
    text = parsed.dump(2, ' ', /*ensure_ascii=*/false,
                       nlohmann::ordered_json::error_handler_t::replace);
  }
  out += "<section id=\"configuration\">\n<h2>Configuration</h2>\n";
  AppendFigure(out, "plot-config",
               parsed.is_discarded() && !text.empty() ? "The run's configuration (not valid JSON)."
                                                      : "The run's configuration.",
               text.empty() ? "" : absl::StrCat("<pre>", HtmlEscape(text), "</pre>"));
  out += "</section>\n";
}

}  // namespace

std::string RenderHtmlReport(const RunReport& report) {
  const std::vector<std::string> metrics = internal::ReportMetricNames(report);
  const std::string title =
      report.title.empty() ? absl::StrCat("Run ", report.run_id) : report.title;
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
      HtmlEscape(title), "</title>\n<style>", kCss, "</style>\n</head>\n<body>\n");
  AppendHeader(out, report, title);
  out += "<main>\n";
  AppendTable(out, report, metrics);
  out += "<section id=\"charts\">\n<h2>Rounds</h2>\n";
  AppendFigure(out, "plot-accuracy",
               "Accuracy per round (metrics named *accuracy; a round's committed attempt, else "
               "its last).",
               MetricChart(report, metrics, "accuracy", "accuracy"));
  AppendFigure(out, "plot-loss",
               "Loss per round (metrics named *loss; a round's committed attempt, else its last).",
               MetricChart(report, metrics, "loss", "loss"));
  const std::string faded =
      " Uncommitted attempts are faded; a round with several attempts is labelled round#attempt.";
  BarChart sites = AttemptBars(report, BarLayout::kGrouped, Axes{"round", "sites"});
  sites.integer_y = true;
  sites.series = {BarSeries{"sampled", {}}, BarSeries{"accepted", {}}};
  for (const ReportRound& r : report.rounds) {
    sites.series[0].values.push_back(r.num_sampled);
    sites.series[1].values.push_back(r.num_accepted);
  }
  AppendFigure(out, "plot-sites", "Sites per round attempt: sampled and accepted." + faded,
               internal::BarChartSvg(sites));
  std::string unit;
  const std::string bytes = BytesChart(report, unit);
  AppendFigure(out, "plot-bytes",
               absl::StrCat("Bytes per round attempt, down (server to sites) and up (sites to "
                            "server)",
                            unit.empty() ? "" : absl::StrCat(", in ", unit), ".", faded),
               bytes);
  AppendFigure(out, "plot-time",
               "Time per round attempt, stacked by phase (unattributed: the rest of the "
               "attempt's duration)." +
                   faded,
               TimeChart(report));
  out += "</section>\n";
  AppendPartition(out, report);
  AppendConfiguration(out, report);
  absl::StrAppend(&out, "</main>\n<footer>",
                  report.generated_by.empty()
                      ? std::string("Run report")
                      : absl::StrCat("Generated by ", HtmlEscape(report.generated_by)),
                  "</footer>\n</body>\n</html>\n");
  return out;
}

}  // namespace fl::simulation
