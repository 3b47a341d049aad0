// The README quotes code from the repository: every fenced block whose first line is a comment
// naming a file ("// examples/custom_model/site.cc" or "# examples/custom_model/CMakeLists.txt")
// must appear, line for line, in that file. So the README's custom-Trainer example is the code
// CI builds, and cannot drift from it.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Quote {
  std::string file;
  std::string body;  // the block's lines after the first, each ending in '\n'
};

std::vector<Quote> Quotes(const std::string& markdown) {
  std::vector<Quote> quotes;
  std::istringstream in(markdown);
  std::string line;
  bool in_block = false, first = false;
  Quote q;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      if (in_block && !q.file.empty()) quotes.push_back(q);
      in_block = !in_block;
      first = in_block;
      q = Quote{};
      continue;
    }
    if (!in_block) continue;
    if (first) {
      first = false;
      for (const std::string prefix : {"// ", "# "}) {
        if (line.rfind(prefix + "examples/", 0) == 0) q.file = line.substr(prefix.size());
      }
      if (!q.file.empty()) continue;
    }
    if (!q.file.empty()) q.body += line + "\n";
  }
  return quotes;
}

TEST(ReadmeTest, EveryQuotedBlockIsInTheFileItNames) {
  const std::vector<Quote> quotes = Quotes(Slurp(std::string(FL_SOURCE_DIR) + "/README.md"));
  ASSERT_GE(quotes.size(), 3u) << "the README's custom-model section quotes three files";
  for (const Quote& q : quotes) {
    const std::string file = Slurp(std::string(FL_SOURCE_DIR) + "/" + q.file);
    ASSERT_FALSE(file.empty()) << q.file << " is missing";
    EXPECT_NE(file.find(q.body), std::string::npos)
        << "the README quotes " << q.file << " but the file no longer has:\n"
        << q.body;
  }
}

}  // namespace
