#include "simulation/internal/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fl::simulation::internal {
namespace {

// The chart's outer width and plot height in SVG units, and the plot area's margins.
constexpr double kWidth = 720;
constexpr double kPlotHeight = 220;
constexpr double kLeft = 64;
constexpr double kRight = 16;
constexpr double kBottom = 46;
constexpr double kLegendRow = 18;
constexpr double kCharWidth = 6.5;  // an estimate for 11px sans-serif, to lay out the legend
constexpr int kMaxXLabels = 20;
constexpr size_t kMaxMarkers = 60;  // lines with more points are drawn without markers

// Tableau 10: distinct, and readable by most colour-blind readers.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

const char* Colour(size_t i) { return kPalette[i % std::size(kPalette)]; }

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them. With `extend`, lo and hi are
// widened to the outer ticks; otherwise only the ticks inside [lo, hi] are returned.
std::vector<double> NiceTicks(double& lo, double& hi, int target, bool integer, bool extend) {
  if (!(hi > lo)) {  // one value: a range around it
    const double pad = integer || lo == 0 ? 1 : std::abs(lo) * 0.5;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  if (integer) step = std::max(1.0, std::round(step));
  const double first = std::ceil(lo / step - 1e-9) * step;
  if (extend) {
    lo = std::floor(lo / step + 1e-9) * step;
    hi = std::ceil(hi / step - 1e-9) * step;
  }
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    const double v = (extend ? lo : first) + i * step;
    if (v > hi + step * 1e-6) break;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

// The plot area and its data ranges.
struct Frame {
  double top = 0;
  double height = kPlotHeight;
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  double Width() const { return kWidth - kLeft - kRight; }
  double X(double v) const { return kLeft + (v - x_lo) / (x_hi - x_lo) * Width(); }
  double Y(double v) const { return top + height - (v - y_lo) / (y_hi - y_lo) * height; }
  double TotalHeight() const { return top + height + kBottom; }
};

// Legend entries in rows across the top; returns the height they take.
double AppendLegend(std::string& out, const std::vector<std::string>& names, bool as_lines) {
  if (names.empty()) return 4;
  double x = kLeft;
  int row = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const double w = 20 + names[i].size() * kCharWidth + 14;
    if (x + w > kWidth - kRight && x > kLeft) {
      x = kLeft;
      ++row;
    }
    const double y = 6 + row * kLegendRow;
    if (as_lines) {
      absl::StrAppend(&out, "<line x1=\"", Coord(x), "\" y1=\"", Coord(y + 5), "\" x2=\"",
                      Coord(x + 14), "\" y2=\"", Coord(y + 5), "\" stroke=\"", Colour(i),
                      "\" stroke-width=\"2\"/>");
    } else {
      absl::StrAppend(&out, "<rect x=\"", Coord(x), "\" y=\"", Coord(y), "\" width=\"10\" ",
                      "height=\"10\" fill=\"", Colour(i), "\"/>");
    }
    absl::StrAppend(&out, "<text x=\"", Coord(x + 18), "\" y=\"", Coord(y + 9), "\">",
                    HtmlEscape(names[i]), "</text>");
    x += w;
  }
  return (row + 1) * kLegendRow + 6;
}

std::string OpenSvg(double height) {
  return absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 ",
                      Coord(kWidth), " ", Coord(height),
                      "\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\">");
}

// Y grid lines with tick labels, the axis lines and both axis labels.
void AppendFrame(std::string& out, const Frame& f, const std::vector<double>& y_ticks,
                 const Axes& axes) {
  for (double v : y_ticks) {
    const std::string y = Coord(f.Y(v));
    absl::StrAppend(&out, "<line x1=\"", Coord(kLeft), "\" y1=\"", y, "\" x2=\"",
                    Coord(kLeft + f.Width()), "\" y2=\"", y, "\" stroke=\"#e5e5e5\"/>",
                    "<text x=\"", Coord(kLeft - 6), "\" y=\"", Coord(f.Y(v) + 4),
                    "\" text-anchor=\"end\">", FormatNumber(v), "</text>");
  }
  const std::string bottom = Coord(f.top + f.height);
  absl::StrAppend(&out, "<path d=\"M", Coord(kLeft), " ", Coord(f.top), "V", bottom, "H",
                  Coord(kLeft + f.Width()), "\" fill=\"none\" stroke=\"#333\"/>");
  absl::StrAppend(&out, "<text x=\"", Coord(kLeft + f.Width() / 2), "\" y=\"",
                  Coord(f.top + f.height + 38), "\" text-anchor=\"middle\">",
                  HtmlEscape(axes.x_label), "</text>");
  absl::StrAppend(&out, "<text transform=\"translate(14 ", Coord(f.top + f.height / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">", HtmlEscape(axes.y_label), "</text>");
}

// A label under the x axis at `x`, with a tick mark.
void AppendXLabel(std::string& out, const Frame& f, double x, std::string_view label) {
  const double bottom = f.top + f.height;
  absl::StrAppend(&out, "<line x1=\"", Coord(x), "\" y1=\"", Coord(bottom), "\" x2=\"", Coord(x),
                  "\" y2=\"", Coord(bottom + 4), "\" stroke=\"#333\"/><text x=\"", Coord(x),
                  "\" y=\"", Coord(bottom + 16), "\" text-anchor=\"middle\">", HtmlEscape(label),
                  "</text>");
}

void AppendRect(std::string& out, double x, double y, double w, double h, const char* fill,
                bool faded, std::string_view tooltip) {
  absl::StrAppend(&out, "<rect x=\"", Coord(x), "\" y=\"", Coord(y), "\" width=\"",
                  Coord(std::max(w, 0.1)), "\" height=\"", Coord(h), "\" fill=\"", fill, "\"",
                  faded ? " fill-opacity=\"0.4\"" : "", "><title>", HtmlEscape(tooltip),
                  "</title></rect>");
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Coord(double v) {
  const double r = std::round(v * 10) / 10;
  if (r == std::round(r)) return absl::StrFormat("%.0f", r == 0 ? 0.0 : r);
  return absl::StrFormat("%.1f", r);
}

std::string FormatNumber(double v, int digits) {
  if (!std::isfinite(v)) return "\xE2\x80\x94";  // an em dash
  const double a = std::abs(v);
  if (a >= 1e9) return absl::StrFormat("%.*gG", digits - 1, v / 1e9);
  if (a >= 1e6) return absl::StrFormat("%.*gM", digits - 1, v / 1e6);
  if (a >= 1e4) return absl::StrFormat("%.*gk", digits - 1, v / 1e3);
  return absl::StrFormat("%.*g", digits, v == 0 ? 0.0 : v);
}

std::string LineChartSvg(const std::vector<LineSeries>& series, const Axes& axes, bool integer_x) {
  // Only the finite points, sorted by x; a series without any has no line and no legend entry.
  std::vector<LineSeries> drawn;
  Frame f;
  for (const LineSeries& s : series) {
    LineSeries finite{s.name, {}};
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      const bool first = drawn.empty() && finite.points.empty();
      f.x_lo = first ? x : std::min(f.x_lo, x);
      f.x_hi = first ? x : std::max(f.x_hi, x);
      f.y_lo = first ? y : std::min(f.y_lo, y);
      f.y_hi = first ? y : std::max(f.y_hi, y);
      finite.points.emplace_back(x, y);
    }
    if (finite.points.empty()) continue;
    std::stable_sort(finite.points.begin(), finite.points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    drawn.push_back(std::move(finite));
  }
  if (drawn.empty()) return "";
  std::string body;
  std::vector<std::string> names;
  for (const LineSeries& s : drawn) names.push_back(s.name);
  f.top = AppendLegend(body, names, /*as_lines=*/true) + 6;
  const std::vector<double> y_ticks = NiceTicks(f.y_lo, f.y_hi, 5, false, /*extend=*/true);
  const std::vector<double> x_ticks =
      NiceTicks(f.x_lo, f.x_hi, std::min(10, kMaxXLabels), integer_x, /*extend=*/false);
  AppendFrame(body, f, y_ticks, axes);
  for (double x : x_ticks) AppendXLabel(body, f, f.X(x), FormatNumber(x));
  for (size_t i = 0; i < drawn.size(); ++i) {
    const LineSeries& s = drawn[i];
    std::string d;
    for (const auto& [x, y] : s.points) {
      absl::StrAppend(&d, d.empty() ? "M" : "L", Coord(f.X(x)), " ", Coord(f.Y(y)));
    }
    absl::StrAppend(&body, "<g stroke=\"", Colour(i), "\" fill=\"", Colour(i), "\"><title>",
                    HtmlEscape(s.name), "</title><path d=\"", d,
                    "\" fill=\"none\" stroke-width=\"2\"/>");
    if (s.points.size() <= kMaxMarkers) {
      for (const auto& [x, y] : s.points) {
        absl::StrAppend(&body, "<circle cx=\"", Coord(f.X(x)), "\" cy=\"", Coord(f.Y(y)),
                        "\" r=\"2.5\"><title>", HtmlEscape(s.name), " at ", FormatNumber(x, 6),
                        ": ", FormatNumber(y, 6), "</title></circle>");
      }
    }
    body += "</g>";
  }
  return absl::StrCat(OpenSvg(f.TotalHeight()), body, "</svg>");
}

std::string BarChartSvg(const BarChart& chart) {
  const size_t n = chart.categories.size();
  Frame f;
  f.y_hi = 0;
  bool any = false;
  for (size_t c = 0; c < n; ++c) {
    double total = 0;
    for (const BarSeries& s : chart.series) {
      if (c >= s.values.size() || !std::isfinite(s.values[c]) || s.values[c] < 0) continue;
      any = true;
      total =
          chart.layout == BarLayout::kStacked ? total + s.values[c] : std::max(total, s.values[c]);
    }
    f.y_hi = std::max(f.y_hi, total);
  }
  if (!any) return "";
  if (f.y_hi == 0) f.y_hi = 1;  // all zeros: still an axis
  std::string body;
  std::vector<std::string> names;
  for (const BarSeries& s : chart.series) names.push_back(s.name);
  f.top = AppendLegend(body, names, /*as_lines=*/false) + 6;
  const std::vector<double> y_ticks =
      NiceTicks(f.y_lo, f.y_hi, 5, chart.integer_y, /*extend=*/true);
  AppendFrame(body, f, y_ticks, chart.axes);
  const double band = f.Width() / static_cast<double>(n);
  const size_t label_every = (n + kMaxXLabels - 1) / kMaxXLabels;
  const size_t k = chart.series.size();
  const double group = band * 0.8;
  for (size_t c = 0; c < n; ++c) {
    const double left = kLeft + band * static_cast<double>(c) + (band - group) / 2;
    const bool faded = c < chart.faded.size() && chart.faded[c];
    double stacked = 0;
    for (size_t i = 0; i < k; ++i) {
      const std::vector<double>& values = chart.series[i].values;
      if (c >= values.size() || !std::isfinite(values[c]) || values[c] < 0) continue;
      const double v = values[c];
      const std::string tooltip =
          absl::StrCat(chart.categories[c], " ", chart.series[i].name, ": ", FormatNumber(v, 6));
      if (chart.layout == BarLayout::kStacked) {
        const double y = f.Y(stacked + v);
        AppendRect(body, left, y, group, f.Y(stacked) - y, Colour(i), faded, tooltip);
        stacked += v;
      } else {
        const double w = group / static_cast<double>(k);
        AppendRect(body, left + w * static_cast<double>(i), f.Y(v), w, f.Y(0) - f.Y(v), Colour(i),
                   faded, tooltip);
      }
    }
    if (c % label_every == 0) {
      AppendXLabel(body, f, kLeft + band * (static_cast<double>(c) + 0.5), chart.categories[c]);
    }
  }
  return absl::StrCat(OpenSvg(f.TotalHeight()), body, "</svg>");
}

std::string HistogramSvg(const std::vector<double>& values, int bins, const Axes& axes) {
  std::vector<double> finite;
  for (double v : values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  if (finite.empty() || bins < 1) return "";
  const auto [min_it, max_it] = std::minmax_element(finite.begin(), finite.end());
  double lo = *min_it;
  double hi = *max_it;
  if (hi == lo) {
    lo -= 0.5;
    hi += 0.5;
    bins = 1;
  }
  const double width = (hi - lo) / bins;
  std::vector<int64_t> counts(static_cast<size_t>(bins), 0);
  for (double v : finite) {
    const int b = std::min(bins - 1, static_cast<int>((v - lo) / width));
    ++counts[static_cast<size_t>(b)];
  }
  Frame f;
  std::string body;
  f.top = AppendLegend(body, {axes.y_label}, /*as_lines=*/false) + 6;
  f.x_lo = lo;
  f.x_hi = hi;
  f.y_hi = static_cast<double>(*std::max_element(counts.begin(), counts.end()));
  const std::vector<double> y_ticks = NiceTicks(f.y_lo, f.y_hi, 5, true, /*extend=*/true);
  AppendFrame(body, f, y_ticks, axes);
  double x_lo = lo;
  double x_hi = hi;
  for (double x : NiceTicks(x_lo, x_hi, 8, false, /*extend=*/false)) {
    AppendXLabel(body, f, f.X(x), FormatNumber(x));
  }
  for (int b = 0; b < bins; ++b) {
    const int64_t count = counts[static_cast<size_t>(b)];
    if (count == 0) continue;
    const double x0 = lo + width * b;
    const double x1 = x0 + width;
    const double y = f.Y(static_cast<double>(count));
    AppendRect(body, f.X(x0) + 0.5, y, f.X(x1) - f.X(x0) - 1, f.Y(0) - y, Colour(0), false,
               absl::StrCat(FormatNumber(x0, 6), " to ", FormatNumber(x1, 6), ": ", count));
  }
  return absl::StrCat(OpenSvg(f.TotalHeight()), body, "</svg>");
}

std::string HeatmapSvg(const Heatmap& heatmap) {
  const size_t rows = heatmap.row_labels.size();
  const size_t columns = heatmap.column_labels.size();
  if (rows == 0 || columns == 0) return "";
  Frame f;
  f.top = 26;
  const double row_height = std::clamp(kPlotHeight / static_cast<double>(rows), 4.0, 18.0);
  f.height = row_height * static_cast<double>(rows);
  const double cell_width = f.Width() / static_cast<double>(columns);
  std::string body;
  // Colours run from 0 to the largest cell, so that small shares still differ; the scale shows
  // five swatches over that range.
  double largest = 0;
  for (const std::vector<double>& row : heatmap.cells) {
    for (double v : row) {
      if (std::isfinite(v)) largest = std::max(largest, std::min(v, 1.0));
    }
  }
  if (largest <= 0) return "";
  absl::StrAppend(&body, "<text x=\"", Coord(kLeft), "\" y=\"14\">",
                  HtmlEscape(heatmap.scale_label), "</text>");
  const double scale_x = kLeft + heatmap.scale_label.size() * kCharWidth + 12;
  auto colour = [largest](double v) {
    const double t = std::clamp(v / largest, 0.0, 1.0);
    auto mix = [t](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
    return absl::StrFormat("#%02x%02x%02x", mix(247, 8), mix(251, 48), mix(255, 107));
  };
  for (int i = 0; i <= 4; ++i) {
    const double x = scale_x + i * 58;
    absl::StrAppend(&body, "<rect x=\"", Coord(x), "\" y=\"4\" width=\"12\" height=\"12\" fill=\"",
                    colour(largest * i / 4), "\" stroke=\"#999\"/><text x=\"", Coord(x + 16),
                    "\" y=\"14\">", FormatNumber(largest * i / 4, 2), "</text>");
  }
  absl::StrAppend(&body, "<rect x=\"", Coord(kLeft), "\" y=\"", Coord(f.top), "\" width=\"",
                  Coord(f.Width()), "\" height=\"", Coord(f.height),
                  "\" fill=\"#f7fbff\" stroke=\"#ccc\"/>");
  const size_t row_label_every = static_cast<size_t>(std::ceil(10.0 / row_height));
  for (size_t r = 0; r < rows; ++r) {
    const double y = f.top + row_height * static_cast<double>(r);
    if (r % row_label_every == 0) {
      absl::StrAppend(&body, "<text x=\"", Coord(kLeft - 6), "\" y=\"",
                      Coord(y + row_height / 2 + 4), "\" text-anchor=\"end\">",
                      HtmlEscape(heatmap.row_labels[r]), "</text>");
    }
    for (size_t c = 0; c < columns; ++c) {
      const double v =
          r < heatmap.cells.size() && c < heatmap.cells[r].size() ? heatmap.cells[r][c] : 0.0;
      if (!std::isfinite(v) || v <= 0) continue;  // the background's colour
      absl::StrAppend(&body, "<rect x=\"", Coord(kLeft + cell_width * static_cast<double>(c)),
                      "\" y=\"", Coord(y), "\" width=\"", Coord(std::max(cell_width, 0.1)),
                      "\" height=\"", Coord(row_height), "\" fill=\"", colour(v), "\"><title>",
                      HtmlEscape(absl::StrCat(heatmap.axes.x_label, " ", heatmap.column_labels[c],
                                              ", ", heatmap.axes.y_label, " ",
                                              heatmap.row_labels[r], ": ", FormatNumber(v, 3))),
                      "</title></rect>");
    }
  }
  const size_t column_label_every = (columns + kMaxXLabels - 1) / kMaxXLabels;
  for (size_t c = 0; c < columns; c += column_label_every) {
    AppendXLabel(body, f, kLeft + cell_width * (static_cast<double>(c) + 0.5),
                 heatmap.column_labels[c]);
  }
  absl::StrAppend(&body, "<text x=\"", Coord(kLeft + f.Width() / 2), "\" y=\"",
                  Coord(f.top + f.height + 38), "\" text-anchor=\"middle\">",
                  HtmlEscape(heatmap.axes.x_label), "</text><text transform=\"translate(14 ",
                  Coord(f.top + f.height / 2), ") rotate(-90)\" text-anchor=\"middle\">",
                  HtmlEscape(heatmap.axes.y_label), "</text>");
  return absl::StrCat(OpenSvg(f.TotalHeight()), body, "</svg>");
}

}  // namespace fl::simulation::internal
