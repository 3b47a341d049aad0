// Text a client sends, kept to a size: the server records decline reasons and errors cut, not
// refused.
#ifndef FL_COMMON_TEXT_H_
#define FL_COMMON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace fl {

// `text` when it is at most `max_bytes`; otherwise its first bytes, cut at a UTF-8 character
// boundary at or before `max_bytes`, with "... (truncated)" appended.
std::string CutUtf8(std::string_view text, size_t max_bytes);

}  // namespace fl

#endif  // FL_COMMON_TEXT_H_
