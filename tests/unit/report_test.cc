#include "fl/simulation/report.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fl::simulation {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A strict check of the page's markup: after "<!DOCTYPE html>", every element other than HTML's
// void elements is closed, in order; "/>" only inside <svg>; <style> and <script> are raw text;
// every attribute value is quoted and has no '<'; a '<' in text starts a tag; every '&' starts
// an entity. Returns "" when the page passes, else what is wrong and where.
std::string CheckMarkup(const std::string& html) {
  static const std::set<std::string> kVoid = {"area",   "base",  "br",    "col",  "embed",
                                              "hr",     "img",   "input", "link", "meta",
                                              "source", "track", "wbr"};
  const std::string doctype = "<!DOCTYPE html>";
  if (html.compare(0, doctype.size(), doctype) != 0) return "no <!DOCTYPE html> first";
  static const std::regex kEntity("^&(#[0-9]+|#x[0-9a-fA-F]+|[a-zA-Z]+);");
  std::vector<std::string> open;
  size_t i = doctype.size();
  while (i < html.size()) {
    const char c = html[i];
    if (c == '&') {
      if (!std::regex_search(html.substr(i, 12), kEntity)) {
        return absl::StrCat("bare '&' at ", i, ": ", html.substr(i, 20));
      }
      ++i;
      continue;
    }
    if (c != '<') {
      ++i;
      continue;
    }
    if (html.compare(i, 4, "<!--") == 0) {
      const size_t end = html.find("-->", i);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
      continue;
    }
    const bool closing = i + 1 < html.size() && html[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < html.size() &&
           (std::isalnum(static_cast<unsigned char>(html[j])) || html[j] == '-')) {
      ++j;
    }
    std::string name = html.substr(name_start, j - name_start);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (name.empty()) return absl::StrCat("stray '<' at ", i, ": ", html.substr(i, 20));
    size_t k = j;
    char quote = 0;
    for (; k < html.size(); ++k) {
      const char ch = html[k];
      if (quote != 0) {
        if (ch == quote) quote = 0;
        if (ch == '<') return absl::StrCat("'<' in an attribute of <", name, "> at ", k);
      } else if (ch == '"' || ch == '\'') {
        quote = ch;
      } else if (ch == '>') {
        break;
      } else if (ch == '<') {
        return absl::StrCat("'<' inside the tag <", name, "> at ", k);
      } else if (ch == '=' && k + 1 < html.size() && html[k + 1] != '"' && html[k + 1] != '\'') {
        return absl::StrCat("unquoted attribute in <", name, "> at ", k);
      }
    }
    if (k == html.size()) return absl::StrCat("unterminated tag <", name, ">");
    const bool self_closing = !closing && html[k - 1] == '/';
    if (closing) {
      if (open.empty()) return absl::StrCat("</", name, "> closes nothing at ", i);
      if (open.back() != name) {
        return absl::StrCat("</", name, "> closes <", open.back(), "> at ", i);
      }
      open.pop_back();
    } else if (self_closing) {
      if (std::find(open.begin(), open.end(), "svg") == open.end()) {
        return absl::StrCat("<", name, "/> outside <svg> at ", i);
      }
    } else if (kVoid.count(name) == 0) {
      open.push_back(name);
      if (name == "style" || name == "script") {  // raw text up to the closing tag
        const size_t end = html.find("</" + name, k);
        if (end == std::string::npos) return absl::StrCat("unclosed <", name, ">");
        i = end;
        continue;
      }
    }
    i = k + 1;
  }
  if (!open.empty()) return absl::StrCat("unclosed <", open.back(), "> (", open.size(), " open)");
  return "";
}

// The text of the figure `id`, from its start tag to its end tag; "" when it is missing.
std::string Figure(const std::string& html, const std::string& id) {
  const size_t start = html.find(absl::StrCat("<figure id=\"", id, "\">"));
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</figure>", start) + 9 - start);
}

// 30 rounds (round 7 with a failed first attempt), 100 parties over 10 classes.
RunReport SampleReport() {
  RunReport report;
  report.title = "FedAvg on Fashion-MNIST";
  report.run_id = 42;
  report.status = "finished";
  report.reason = "all rounds done";
  report.configuration_json = R"({"rounds":30,"strategy":{"name":"fedavg","lr":0.1}})";
  report.wall_seconds = 754.5;
  report.generated_by = "fl sim (test)";
  for (int32_t r = 1; r <= 30; ++r) {
    if (r == 7) {
      ReportRound failed;
      failed.round = 7;
      failed.attempt = 1;
      failed.num_sampled = 10;
      failed.num_accepted = 2;
      failed.duration_s = 30;
      failed.bytes_down = 10 << 20;
      failed.reason = "too few updates: 2 of 10, need 5";
      report.rounds.push_back(failed);
    }
    ReportRound round;
    round.round = r;
    round.attempt = r == 7 ? 2 : 1;
    round.committed = true;
    round.num_sampled = 10;
    round.num_accepted = 9 + r % 2;
    round.duration_s = 12.5 + r % 3;
    round.metrics = {{"test_accuracy", 0.5 + 0.4 * (1 - std::exp(-r / 8.0))},
                     {"eval_accuracy", 0.48 + 0.4 * (1 - std::exp(-r / 9.0))},
                     {"test_loss", 1.5 * std::exp(-r / 10.0) + 0.3},
                     {"train_loss", 1.4 * std::exp(-r / 9.0) + 0.25}};
    round.phase_seconds = {{"train", 9.0}, {"aggregate", 1.0}, {"evaluate", 1.5}};
    round.bytes_down = 10 << 20;
    round.bytes_up = (9 + r % 2) << 20;
    report.rounds.push_back(round);
  }
  for (int p = 0; p < 100; ++p) {
    ReportPartitionParty party;
    party.class_counts.resize(10);
    for (int c = 0; c < 10; ++c) {
      party.class_counts[static_cast<size_t>(c)] = (p * 7 + c * 13) % 17 == 0 ? 0 : (p + c) % 9 * 5;
      party.examples += party.class_counts[static_cast<size_t>(c)];
    }
    report.partition.push_back(party);
  }
  report.partition_summary_text = "Dirichlet(0.5) over 10 classes, seed 0";
  return report;
}

TEST(CheckMarkupTest, CatchesMalformedMarkup) {
  const std::string ok =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><style>a<b</style>"
      "</head><body><p>a &amp; b</p><svg><rect x=\"1\"/></svg></body></html>";
  EXPECT_EQ(CheckMarkup(ok), "");
  for (const std::string bad :
       {"<html><p></html>", "<p><b></p></b>", "<p>a & b</p>", "<p>1 < 2</p>", "<p><rect/></p>",
        "<p>", "</p>", "<p class=x></p>", "<p title=\"<b>\"></p>"}) {
    EXPECT_NE(CheckMarkup("<!DOCTYPE html>" + bad), "") << bad;
  }
  EXPECT_NE(CheckMarkup("<html></html>"), "");
}

TEST(RenderHtmlReportTest, SampleReportIsWellFormedWithEveryFigureDrawn) {
  const std::string html = RenderHtmlReport(SampleReport());
  EXPECT_EQ(CheckMarkup(html), "");
  EXPECT_FALSE(Contains(html, "<script"));
  // Self-contained: nothing fetched.
  for (const char* external : {"<link", "src=", "href=", "@import", "url("}) {
    EXPECT_FALSE(Contains(html, external)) << external;
  }
  for (const char* id : {"plot-accuracy", "plot-loss", "plot-sites", "plot-bytes", "plot-time",
                         "plot-partition", "plot-partition-classes"}) {
    const std::string figure = Figure(html, id);
    ASSERT_NE(figure, "") << id;
    EXPECT_TRUE(Contains(figure, "<svg")) << id;
    EXPECT_TRUE(Contains(figure, "<figcaption>")) << id;
    EXPECT_FALSE(Contains(figure, "no data")) << id;
  }
  const std::string config = Figure(html, "plot-config");
  EXPECT_TRUE(Contains(config, "<pre>{\n  &quot;rounds&quot;: 30,")) << config;
  // The header, a row per attempt, the legend's metric names, the failed attempt.
  EXPECT_TRUE(Contains(html, "<h1>FedAvg on Fashion-MNIST</h1>"));
  EXPECT_TRUE(Contains(html, "<dd>42</dd>"));
  EXPECT_TRUE(Contains(html, "12 min 35 s"));
  EXPECT_TRUE(Contains(html, "30 committed of 31 attempts"));
  EXPECT_TRUE(Contains(html,
                       "<th>eval_accuracy</th><th>test_accuracy</th><th>test_loss</th>"
                       "<th>train_loss</th>"));
  EXPECT_TRUE(Contains(html, "<tr class=\"uncommitted\">"));
  EXPECT_TRUE(Contains(Figure(html, "plot-accuracy"), ">eval_accuracy</text>"));
  EXPECT_FALSE(Contains(Figure(html, "plot-accuracy"), ">test_loss</text>"));
  EXPECT_TRUE(Contains(Figure(html, "plot-sites"), ">7#1</text>") ||
              Contains(Figure(html, "plot-sites"), "7#1 sampled"));
  EXPECT_TRUE(Contains(Figure(html, "plot-sites"), "fill-opacity=\"0.4\""));
  EXPECT_TRUE(Contains(Figure(html, "plot-bytes"), "MiB"));
  EXPECT_TRUE(Contains(Figure(html, "plot-time"), ">evaluate</text>"));
  EXPECT_TRUE(Contains(Figure(html, "plot-time"), ">unattributed</text>"));
  EXPECT_TRUE(Contains(html, "Dirichlet(0.5) over 10 classes, seed 0"));
  EXPECT_TRUE(Contains(html, "Generated by fl sim (test)"));
}

TEST(RenderHtmlReportTest, CoordinatesHaveAtMostOneDecimal) {
  const std::string html = RenderHtmlReport(SampleReport());
  const std::regex too_precise(
      R"re((?:\s(?:x|y|x1|x2|y1|y2|cx|cy|width|height)="-?[0-9]+\.[0-9]{2,}"))re"
      R"re(|(?:d="[^"]*[0-9]\.[0-9]{2,})|(?:translate\([^)]*[0-9]\.[0-9]{2,}))re");
  ASSERT_TRUE(std::regex_search(std::string(" x=\"1.25\""), too_precise));
  std::smatch match;
  EXPECT_FALSE(std::regex_search(html, match, too_precise)) << match.str();
}

TEST(RenderHtmlReportTest, EscapesEveryStringFromTheData) {
  RunReport report = SampleReport();
  report.title = "Run <b>bold</b> & \"quoted\"";
  report.reason = "stopped by 'admin' <script>alert(1)</script>";
  report.status = "<i>";
  report.generated_by = "<img src=x>";
  report.configuration_json = R"({"note": "</pre><script>alert(2)</script>"})";
  report.partition_summary_text = "<style>body{display:none}</style>";
  report.rounds[0].metrics["<script>alert(3)</script>accuracy"] = 0.5;
  report.rounds[0].phase_seconds["<svg onload=x>"] = 1;
  report.rounds[0].reason = "a & b < c";
  const std::string html = RenderHtmlReport(report);
  EXPECT_EQ(CheckMarkup(html), "");
  EXPECT_FALSE(Contains(html, "<script"));
  EXPECT_FALSE(Contains(html, "<b>bold"));
  EXPECT_FALSE(Contains(html, "<img"));
  EXPECT_FALSE(Contains(html, "<svg onload"));
  EXPECT_FALSE(Contains(html, "<style>body{display:none}"));
  EXPECT_TRUE(Contains(html, "Run &lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot;"));
  EXPECT_TRUE(Contains(html, "<th>&lt;script&gt;alert(3)&lt;/script&gt;accuracy</th>"));
  // The metric's name is in the accuracy chart's legend, escaped.
  EXPECT_TRUE(
      Contains(Figure(html, "plot-accuracy"), ">&lt;script&gt;alert(3)&lt;/script&gt;accuracy<"));
  EXPECT_TRUE(Contains(html, "stopped by &#39;admin&#39; &lt;script&gt;"));
  EXPECT_TRUE(Contains(html, "&lt;/pre&gt;&lt;script&gt;alert(2)"));
}

TEST(RenderHtmlReportTest, ChartsWithoutDataSayNoData) {
  RunReport report;
  report.run_id = 7;
  report.status = "failed";
  for (int32_t r = 1; r <= 3; ++r) {
    ReportRound round;
    round.round = r;
    round.attempt = 1;
    round.num_sampled = 4;
    round.duration_s = 2;
    round.metrics = {{"test_accuracy", kNaN}, {"x", 1}};  // no finite accuracy, no loss at all
    report.rounds.push_back(round);
  }
  const std::string html = RenderHtmlReport(report);
  EXPECT_EQ(CheckMarkup(html), "");
  EXPECT_TRUE(Contains(html, "<title>Run 7</title>"));
  for (const char* id : {"plot-accuracy", "plot-loss", "plot-bytes", "plot-config"}) {
    const std::string figure = Figure(html, id);
    ASSERT_NE(figure, "") << id;
    EXPECT_TRUE(Contains(figure, "<p class=\"nodata\">no data</p>")) << id;
    EXPECT_FALSE(Contains(figure, "<svg")) << id;
  }
  for (const char* id : {"plot-sites", "plot-time"}) {
    EXPECT_TRUE(Contains(Figure(html, id), "<svg")) << id;
  }
  // Without durations split by phase, the time chart draws whole durations.
  EXPECT_TRUE(Contains(Figure(html, "plot-time"), ">total (no phases)</text>"));
  // No partition: no partition section at all.
  EXPECT_EQ(Figure(html, "plot-partition"), "");
  EXPECT_FALSE(Contains(html, "id=\"partition\""));
  // A non-finite metric is a dash in the table.
  EXPECT_TRUE(Contains(html, "<td>\xE2\x80\x94</td>"));
}

TEST(RenderHtmlReportTest, NonFiniteValuesAreSkippedInCharts) {
  RunReport report;
  for (int32_t r = 1; r <= 4; ++r) {
    ReportRound round;
    round.round = r;
    round.committed = true;
    round.duration_s = r == 2 ? kNaN : 1.0;
    round.metrics = {{"test_accuracy", r == 3 ? kNaN : 0.5 + 0.1 * r},
                     {"never_accuracy", std::numeric_limits<double>::infinity()}};
    report.rounds.push_back(round);
  }
  const std::string html = RenderHtmlReport(report);
  EXPECT_EQ(CheckMarkup(html), "");
  const std::string accuracy = Figure(html, "plot-accuracy");
  EXPECT_TRUE(Contains(accuracy, ">test_accuracy</text>"));
  EXPECT_FALSE(Contains(accuracy, "never_accuracy")) << "a series with no finite point is drawn";
  // Three markers: round 3's NaN is skipped.
  size_t markers = 0;
  for (size_t at = 0; (at = accuracy.find("<circle", at)) != std::string::npos; ++at) ++markers;
  EXPECT_EQ(markers, 3u);
  EXPECT_FALSE(Contains(html, "nan"));
  EXPECT_FALSE(Contains(html, "inf<"));
}

TEST(RenderHtmlReportTest, EmptyReportIsWellFormed) {
  const std::string html = RenderHtmlReport(RunReport{});
  EXPECT_EQ(CheckMarkup(html), "");
  for (const char* id :
       {"plot-accuracy", "plot-loss", "plot-sites", "plot-bytes", "plot-time", "plot-config"}) {
    EXPECT_TRUE(Contains(Figure(html, id), "no data")) << id;
  }
}

TEST(RenderHtmlReportTest, ManyPartiesAreAHistogramAndTheHeatStripIsCapped) {
  RunReport report = SampleReport();
  report.partition.clear();
  for (int p = 0; p < 500; ++p) {
    report.partition.push_back(ReportPartitionParty{100 + (p * 37) % 400, {50, 50 + p % 3}});
  }
  const std::string html = RenderHtmlReport(report);
  EXPECT_EQ(CheckMarkup(html), "");
  const std::string sizes = Figure(html, "plot-partition");
  EXPECT_TRUE(Contains(sizes, "Histogram of party sizes")) << sizes.substr(0, 300);
  EXPECT_TRUE(Contains(sizes, "<svg"));
  const std::string classes = Figure(html, "plot-partition-classes");
  EXPECT_TRUE(Contains(classes, "only the 100 largest of 500 parties are drawn"));
  EXPECT_TRUE(Contains(classes, "<svg"));
}

TEST(RenderHtmlReportTest, PartiesWithoutClassCountsHaveNoHeatStrip) {
  RunReport report;
  report.partition = {{30, {}}, {10, {}}, {20, {}}};
  const std::string html = RenderHtmlReport(report);
  EXPECT_EQ(CheckMarkup(html), "");
  EXPECT_TRUE(Contains(Figure(html, "plot-partition"), "<svg"));
  EXPECT_TRUE(Contains(Figure(html, "plot-partition"), "3 parties, 60 examples; largest 30"));
  EXPECT_TRUE(Contains(Figure(html, "plot-partition-classes"), "no data"));
}

std::vector<std::string> SplitCrlf(const std::string& csv) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = csv.find("\r\n", start)) != std::string::npos; start = end + 2) {
    lines.push_back(csv.substr(start, end - start));
  }
  EXPECT_EQ(start, csv.size()) << "the CSV does not end with CRLF";
  return lines;
}

TEST(RoundsCsvTest, ColumnsAreTheFixedOnesThenSortedMetricsThenPhases) {
  RunReport report;
  ReportRound a;
  a.round = 1;
  a.attempt = 1;
  a.committed = true;
  a.num_sampled = 5;
  a.num_accepted = 4;
  a.duration_s = 1.25;
  a.bytes_down = 1000;
  a.bytes_up = 2000;
  a.metrics = {{"test_loss", 0.1}, {"b,metric", 2}};
  a.phase_seconds = {{"train", 1}};
  ReportRound b;
  b.round = 2;
  b.attempt = 3;
  b.duration_s = kNaN;
  b.metrics = {{"test_accuracy", std::numeric_limits<double>::infinity()}, {"test_loss", 0.3}};
  b.reason = "said \"no\", then\nleft";
  report.rounds = {a, b};
  const std::vector<std::string> lines = SplitCrlf(RoundsCsv(report));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "round,attempt,committed,num_sampled,num_accepted,duration_s,bytes_down,bytes_up,"
            "reason,\"b,metric\",test_accuracy,test_loss,phase_seconds.train");
  EXPECT_EQ(lines[1], "1,1,true,5,4,1.25,1000,2000,,2,,0.1,1");
  // The quoted reason holds a newline, so it spans what SplitCrlf sees as one line (LF, not CRLF).
  EXPECT_EQ(lines[2], "2,3,false,0,0,,0,0,\"said \"\"no\"\", then\nleft\",,,0.3,");
}

TEST(RoundsCsvTest, DoublesReadBackExactly) {
  RunReport report;
  ReportRound round;
  round.duration_s = 0.1 + 0.2;
  round.metrics = {{"m", 1.0 / 3}};
  report.rounds = {round};
  const std::vector<std::string> lines = SplitCrlf(RoundsCsv(report));
  ASSERT_EQ(lines.size(), 2u);
  std::stringstream fields(lines[1]);
  std::vector<std::string> cells;
  for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
  ASSERT_EQ(cells.size(), 10u);
  EXPECT_EQ(std::stod(cells[5]), 0.1 + 0.2);
  EXPECT_EQ(std::stod(cells[9]), 1.0 / 3);
}

TEST(RoundsJsonTest, RoundTripsThroughAParser) {
  RunReport report = SampleReport();
  report.rounds[0].metrics["test_loss"] = kNaN;
  const nlohmann::json json = nlohmann::json::parse(RoundsJson(report));
  EXPECT_EQ(json["run_id"], 42);
  EXPECT_EQ(json["status"], "finished");
  EXPECT_EQ(json["reason"], "all rounds done");
  EXPECT_EQ(json["wall_seconds"], 754.5);
  EXPECT_EQ(json["configuration"]["strategy"]["lr"], 0.1);
  ASSERT_EQ(json["rounds"].size(), report.rounds.size());
  for (size_t i = 0; i < report.rounds.size(); ++i) {
    const ReportRound& want = report.rounds[i];
    const nlohmann::json& got = json["rounds"][i];
    EXPECT_EQ(got["round"], want.round);
    EXPECT_EQ(got["attempt"], want.attempt);
    EXPECT_EQ(got["committed"], want.committed);
    EXPECT_EQ(got["num_sampled"], want.num_sampled);
    EXPECT_EQ(got["num_accepted"], want.num_accepted);
    EXPECT_EQ(got["duration_s"], want.duration_s);
    EXPECT_EQ(got["bytes_down"], want.bytes_down);
    EXPECT_EQ(got["bytes_up"], want.bytes_up);
    EXPECT_EQ(got["reason"], want.reason);
    EXPECT_EQ(got["phase_seconds"].size(), want.phase_seconds.size());
    for (const auto& [name, v] : want.metrics) {
      if (std::isfinite(v)) {
        EXPECT_EQ(got["metrics"][name], v) << name;
      } else {
        EXPECT_TRUE(got["metrics"][name].is_null()) << name;
      }
    }
  }
  ASSERT_EQ(json["partition"]["parties"].size(), 100u);
  EXPECT_EQ(json["partition"]["parties"][3]["examples"], report.partition[3].examples);
  EXPECT_EQ(json["partition"]["parties"][3]["class_counts"].get<std::vector<int64_t>>(),
            report.partition[3].class_counts);
  EXPECT_EQ(json["partition"]["summary"], report.partition_summary_text);
}

TEST(RoundsJsonTest, ConfigurationThatIsNotJsonStaysAString) {
  RunReport report;
  report.configuration_json = "rounds = 3 # TOML, not JSON";
  report.reason = std::string("bad utf-8: \xff");
  const nlohmann::json json = nlohmann::json::parse(RoundsJson(report));
  EXPECT_EQ(json["configuration"], "rounds = 3 # TOML, not JSON");
  EXPECT_EQ(json["reason"], "bad utf-8: \xEF\xBF\xBD");
  EXPECT_TRUE(json["rounds"].empty());
  EXPECT_TRUE(json["partition"]["parties"].empty());
  // The page shows it verbatim, escaped.
  EXPECT_TRUE(Contains(Figure(RenderHtmlReport(report), "plot-config"),
                       "<pre>rounds = 3 # TOML, not JSON</pre>"));
}

class WriteReportFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fl_report_test_", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string Read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::filesystem::path dir_;
};

TEST_F(WriteReportFilesTest, WritesTheThreeFiles) {
  const RunReport report = SampleReport();
  const std::string prefix = (dir_ / "run-42").string();
  ASSERT_TRUE(WriteReportFiles(report, prefix).ok());
  EXPECT_EQ(Read(prefix + ".html"), RenderHtmlReport(report));
  EXPECT_EQ(Read(prefix + ".csv"), RoundsCsv(report));
  EXPECT_EQ(Read(prefix + ".json"), RoundsJson(report));
  // Nothing else (no temporary file left behind).
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 3);
  // Again over the old files.
  ASSERT_TRUE(WriteReportFiles(RunReport{}, prefix).ok());
  EXPECT_EQ(Read(prefix + ".csv"), RoundsCsv(RunReport{}));
}

TEST_F(WriteReportFilesTest, RefusesAnUnwritableDirectoryNamingTheFile) {
  // A regular file where a directory should be: unwritable even for root.
  const std::filesystem::path not_a_dir = dir_ / "file";
  std::ofstream(not_a_dir) << "x";
  const std::string prefix = (not_a_dir / "run").string();
  const absl::Status status = WriteReportFiles(SampleReport(), prefix);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(std::string(status.message()), prefix + ".html")) << status;
  const std::string missing = (dir_ / "missing" / "run").string();
  const absl::Status missing_status = WriteReportFiles(SampleReport(), missing);
  EXPECT_EQ(missing_status.code(), absl::StatusCode::kNotFound) << missing_status;
  EXPECT_TRUE(Contains(std::string(missing_status.message()), missing + ".html"));
}

TEST_F(WriteReportFilesTest, RefusesAnEmptyPrefix) {
  EXPECT_EQ(WriteReportFiles(SampleReport(), "").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fl::simulation
