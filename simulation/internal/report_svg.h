// Small inline-SVG charts for the run report (simulation/src/report.cc): line charts over a
// numeric x, bar charts over categories (grouped or stacked), a histogram and a heat strip, each
// with axes, ticks, axis labels and a legend. Coordinates are rounded to one decimal. Every
// string that reaches the SVG is HTML-escaped here. Each function returns "" when it has nothing
// finite to draw, so that the caller can say "no data" instead.
//
// Internal to fl::simulation: include it as "simulation/internal/report_svg.h".
#ifndef FL_SIMULATION_INTERNAL_REPORT_SVG_H_
#define FL_SIMULATION_INTERNAL_REPORT_SVG_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fl::simulation::internal {

// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string HtmlEscape(std::string_view text);

// `v` with at most one decimal, without a trailing ".0" ("12.5", "3", "-0.5").
std::string Coord(double v);

// A compact number for ticks and tooltips: up to `digits` significant digits, with k, M, G
// suffixes from 10^4 up ("0.25", "1200", "60k", "1.5M").
std::string FormatNumber(double v, int digits = 4);

struct Axes {
  std::string x_label;
  std::string y_label;
};

// One named line; points with a non-finite coordinate are skipped.
struct LineSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// Lines over a numeric x (ticks at integers when `integer_x`), y range fitted to the data; a
// series with no finite point is left out, legend included.
std::string LineChartSvg(const std::vector<LineSeries>& series, const Axes& axes, bool integer_x);

enum class BarLayout { kGrouped, kStacked };

// One named value per category; non-finite and negative values draw no bar.
struct BarSeries {
  std::string name;
  std::vector<double> values;
};

struct BarChart {
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
  BarLayout layout = BarLayout::kGrouped;
  Axes axes;
  std::vector<bool> faded;  // per category (may be empty): drawn at lower opacity
  bool integer_y = false;   // y ticks at whole numbers only (counts)
};

// Bars from zero; a label under at most ~20 categories, evenly spaced.
std::string BarChartSvg(const BarChart& chart);

// A histogram of `values` (non-finite ones skipped) in `bins` equal-width bins over their range;
// the legend names the bars by the y label.
std::string HistogramSvg(const std::vector<double>& values, int bins, const Axes& axes);

// A heat strip: cells[row][column] in [0, 1], white (0) to dark blue (the largest cell), with a
// colour scale labelled `scale_label`; a label under at most ~20 columns, evenly spaced. ""
// when no cell is above 0.
struct Heatmap {
  std::vector<std::string> row_labels;
  std::vector<std::string> column_labels;
  std::vector<std::vector<double>> cells;
  Axes axes;
  std::string scale_label;
};
std::string HeatmapSvg(const Heatmap& heatmap);

}  // namespace fl::simulation::internal

#endif  // FL_SIMULATION_INTERNAL_REPORT_SVG_H_
