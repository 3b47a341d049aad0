#include "fl/common/text.h"

namespace fl {

std::string CutUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  std::string cut(text.substr(0, end));
  cut += "... (truncated)";
  return cut;
}

}  // namespace fl
