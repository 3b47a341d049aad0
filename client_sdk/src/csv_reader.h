// The record layer of the CSV loader: splits a file into records of unquoted, trimmed fields.
//
// RFC 4180 quoting: a field wrapped in double quotes may hold the delimiter, line breaks and
// doubled quotes (""). Spaces (and tabs, unless the tab is the delimiter) around a field are
// trimmed; a double quote inside an unquoted field is kept as it is. A UTF-8 byte order mark at
// the start of the file, CR before LF, and blank lines (outside quotes) are skipped.
//
// Not thread-safe: one reader per file.
#ifndef FL_CLIENT_SRC_CSV_READER_H_
#define FL_CLIENT_SRC_CSV_READER_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::client::internal {

class CsvReader {
 public:
  // Opens `path`; NOT_FOUND naming it when it cannot be opened.
  static absl::StatusOr<CsvReader> Open(const std::string& path, char delimiter);

  // Reads the next record into `fields` (replacing its contents). Returns false at the end of
  // the file. INVALID_ARGUMENT naming the file and row for an unterminated quote or text after a
  // closing quote, DATA_LOSS for a read error.
  absl::StatusOr<bool> Next(std::vector<std::string>& fields);

  // The 1-based line where the last record returned by Next starts.
  int64_t row() const { return row_; }
  // The last record's text as in the file (lines joined by '\n', without CR), for hints.
  const std::string& raw() const { return record_; }

 private:
  CsvReader(std::string path, char delimiter) : path_(std::move(path)), delimiter_(delimiter) {}

  // Reads one physical line into `line`, without its CR; false at the end of the file.
  bool ReadLine(std::string& line);
  bool IsBlank(char c) const { return c == ' ' || (c == '\t' && delimiter_ != '\t'); }
  // Splits record_ into `fields`; an error message on a malformed quote.
  absl::Status Split(std::vector<std::string>& fields) const;

  std::string path_;
  char delimiter_;
  std::ifstream in_;
  int64_t line_ = 0;  // lines read so far
  int64_t row_ = 0;
  std::string record_;
  std::string line_buffer_;
};

}  // namespace fl::client::internal

#endif  // FL_CLIENT_SRC_CSV_READER_H_
