#include "client_sdk/src/csv_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fl::client::internal {

absl::StatusOr<CsvReader> CsvReader::Open(const std::string& path, char delimiter) {
  CsvReader reader(path, delimiter);
  reader.in_.open(path, std::ios::binary);
  if (!reader.in_) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  return reader;
}

bool CsvReader::ReadLine(std::string& line) {
  if (!std::getline(in_, line)) return false;
  ++line_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

absl::StatusOr<bool> CsvReader::Next(std::vector<std::string>& fields) {
  while (true) {
    if (!ReadLine(record_)) {
      if (in_.bad()) return absl::DataLossError(absl::StrCat(path_, ": read error"));
      return false;
    }
    if (line_ == 1 && record_.starts_with("\xEF\xBB\xBF")) record_.erase(0, 3);
    if (!std::all_of(record_.begin(), record_.end(), [this](char c) { return IsBlank(c); })) {
      break;
    }
  }
  row_ = line_;
  // A quoted field may span lines: while the record holds an odd number of quotes, one is open.
  // Counting only the new line keeps a stray quote linear in the file's size.
  size_t quotes = static_cast<size_t>(std::count(record_.begin(), record_.end(), '"'));
  while (quotes % 2 == 1) {
    if (!ReadLine(line_buffer_)) {
      if (in_.bad()) return absl::DataLossError(absl::StrCat(path_, ": read error"));
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": row ", row_,
                       ": a double quote opens a field that is not closed before the "
                       "end of the file"));
    }
    record_ += '\n';
    record_ += line_buffer_;
    quotes += static_cast<size_t>(std::count(line_buffer_.begin(), line_buffer_.end(), '"'));
  }
  if (absl::Status s = Split(fields); !s.ok()) return s;
  return true;
}

absl::Status CsvReader::Split(std::vector<std::string>& fields) const {
  fields.clear();
  const std::string_view text = record_;
  const size_t n = text.size();
  size_t i = 0;
  while (true) {
    while (i < n && IsBlank(text[i])) ++i;
    std::string& field = fields.emplace_back();
    if (i < n && text[i] == '"') {
      bool closed = false;
      for (++i; i < n; ++i) {
        if (text[i] != '"') {
          field += text[i];
        } else if (i + 1 < n && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          closed = true;
          ++i;
          break;
        }
      }
      if (!closed) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": row ", row_, ": field ",
                                                       fields.size(), ": the quote is not closed"));
      }
      while (i < n && IsBlank(text[i])) ++i;
      if (i < n && text[i] != delimiter_) {
        const size_t end = std::min(text.find(delimiter_, i), n);
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": row ", row_, ": field ", fields.size(), ": text after the closing quote: '",
            absl::string_view(text.data() + i, end - i),
            "' (a quote inside a quoted field is written \"\")"));
      }
    } else {
      const size_t start = i;
      while (i < n && text[i] != delimiter_) ++i;
      size_t end = i;
      while (end > start && IsBlank(text[end - 1])) --end;
      field.assign(text.substr(start, end - start));
    }
    if (i >= n) break;
    ++i;  // the delimiter
  }
  return absl::OkStatus();
}

}  // namespace fl::client::internal
