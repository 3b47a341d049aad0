// A main for fuzz targets where libFuzzer is not available (GCC builds, CI): runs every input
// given, then deterministic mutations of them, through LLVMFuzzerTestOneInput. Built with ASan
// and UBSan (tests/fuzz/CMakeLists.txt), a bad access aborts the run and fails its test.
//
//   <replay> [--mutations=N] [--seed=S] [--format=safetensors] [--dict=FILE]
//            [--artifact_prefix=P] PATH...
// PATH: a file, or a directory whose regular files are all read (sorted by name). N (default
// 5000) mutants are made with a fixed-seed std::mt19937_64 (S, default 1), from the inputs in
// turn, each by one to four of these generic mutations: a bit flip, an interesting byte,
// inserted or deleted or duplicated bytes, a truncation, an interesting integer (1, 2, 4 or 8
// bytes, either byte order) written over the input, a decimal number in the input swapped for an
// interesting one, a piece of another input spliced in, and (with --dict, a libFuzzer dictionary:
// lines `"token"` or `name="token"`, with \\, \" and \xAB escapes) a token inserted or written
// over the input. --format=safetensors adds mutations that know the safetensors layout: a new
// header size (the first 8 bytes as a little-endian u64), and, in the JSON header, a number or a
// dtype swapped for an interesting one, or the data region grown or cut, with the header size
// fixed up.
// When an input aborts the run (a sanitizer's report, a broken invariant, a fatal signal), it is
// written first to P + "crash-replay-<seed>-<index>" (P: default the working directory), so that
// `<replay> --mutations=0 FILE` or the libFuzzer target replays it.
// Exits 0 when every input ran; 2 on a usage error or when no input was found.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define FL_REPLAY_HAS_DEATH_CALLBACK 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::string;

// The input being run and where it goes if the run dies (written with async-signal-safe calls).
const std::vector<uint8_t>* current = nullptr;
std::string crash_path;

void WriteCurrentInput() {
  static bool written = false;
  if (current == nullptr || written) return;
  written = true;
  const int fd = ::open(crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < current->size()) {
    const ssize_t n = ::write(fd, current->data() + done, current->size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  static constexpr char kNote[] = "replay: the input that ended the run is in ";
  (void)!::write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
  (void)!::write(STDERR_FILENO, crash_path.data(), crash_path.size());
  (void)!::write(STDERR_FILENO, "\n", 1);
}

void OnFatalSignal(int signal) {
  WriteCurrentInput();
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void WriteInputsOnDeath() {
  for (int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(signal, OnFatalSignal);
#ifdef FL_REPLAY_HAS_DEATH_CALLBACK
  __sanitizer_set_death_callback(WriteCurrentInput);  // ASan and UBSan end with _exit, not abort
#endif
}

// As libFuzzer does, hands the target a heap block of exactly the input's size, so that ASan sees
// a read one byte past the end (a std::string has slack and a terminating NUL after its bytes).
void Run(const Bytes& input, const std::string& path) {
  const std::vector<uint8_t> exact(input.begin(), input.end());
  crash_path = path;
  current = &exact;
  LLVMFuzzerTestOneInput(exact.data(), exact.size());
  current = nullptr;
}

bool ReadInputs(const std::filesystem::path& path, std::vector<Bytes>& inputs) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      if (!ReadInputs(file, inputs)) return false;
    }
    return !error;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The tokens of a libFuzzer dictionary; nullopt (naming the line) for a line it cannot read.
std::optional<std::vector<Bytes>> ReadDictionary(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::vector<Bytes> tokens;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t open = line.find('"');
    const size_t close = line.rfind('"');
    if (open == std::string::npos || close <= open) {
      std::fprintf(stderr, "%s:%d: not a dictionary entry\n", path.c_str(), number);
      return std::nullopt;
    }
    Bytes token;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] != '\\' || i + 1 >= close) {
        token.push_back(line[i]);
        continue;
      }
      const char next = line[++i];
      if (next == 'x' && i + 2 < close && HexDigit(line[i + 1]) >= 0 &&
          HexDigit(line[i + 2]) >= 0) {
        token.push_back(static_cast<char>(HexDigit(line[i + 1]) * 16 + HexDigit(line[i + 2])));
        i += 2;
      } else {
        token.push_back(next);
      }
    }
    if (!token.empty()) tokens.push_back(std::move(token));
  }
  return tokens;
}

class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Bytes>& inputs, std::vector<Bytes> dictionary,
          bool safetensors)
      : rng_(seed),
        inputs_(inputs),
        dictionary_(std::move(dictionary)),
        safetensors_(safetensors) {}

  Bytes Mutate(Bytes b) {
    const int steps = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < steps; ++i) {
      const uint64_t kinds = kGenericKinds + (safetensors_ ? kSafetensorsKinds : 0);
      const uint64_t kind = Below(kinds);
      if (kind < kGenericKinds) {
        MutateGeneric(kind, b);
      } else {
        MutateSafetensors(kind - kGenericKinds, b);
      }
    }
    return b;
  }

 private:
  static constexpr uint64_t kGenericKinds = 11;
  static constexpr uint64_t kSafetensorsKinds = 5;
  static constexpr char kBytes[] = {'\0', '\xff', '{', '}',  '[',    ']',    '"',
                                    ',',  ':',    ' ', '0',  '9',    '-',    '.',
                                    'e',  '=',    '#', '\\', '\x80', '\x7f', '\n'};
  static constexpr std::string_view kNumbers[] = {"0",
                                                  "1",
                                                  "4",
                                                  "8",
                                                  "-1",
                                                  "-0",
                                                  "1.5",
                                                  "1e400",
                                                  "nan",
                                                  "inf",
                                                  "127",
                                                  "128",
                                                  "255",
                                                  "256",
                                                  "65535",
                                                  "65536",
                                                  "2147483647",
                                                  "2147483648",
                                                  "4294967296",
                                                  "274877906944",
                                                  "9223372036854775807",
                                                  "9223372036854775808",
                                                  "18446744073709551615",
                                                  "18446744073709551616",
                                                  "99999999999999999999999"};

  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  uint64_t InterestingInteger() {
    static constexpr uint64_t kValues[] = {
        0,      1,      2,       0x7f,       0x80,       0xff,       0x100,      0x7fff,
        0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000};
    switch (Below(4)) {
      case 0:
        return ~uint64_t{0} - Below(2);  // -1, -2
      case 1:
        return rng_();
      case 2:
        return uint64_t{1} << 63;
      default:
        return kValues[Below(std::size(kValues))];
    }
  }

  void MutateGeneric(uint64_t kind, Bytes& b) {
    switch (kind) {
      case 0:  // bit flip
        if (!b.empty()) b[Below(b.size())] ^= static_cast<char>(1u << Below(8));
        return;
      case 1:  // an interesting byte
        if (!b.empty()) b[Below(b.size())] = kBytes[Below(std::size(kBytes))];
        return;
      case 2:  // insert bytes
        b.insert(Below(b.size() + 1), 1 + Below(8), kBytes[Below(std::size(kBytes))]);
        return;
      case 3:  // delete a range
        if (!b.empty()) {
          const size_t at = Below(b.size());
          b.erase(at, 1 + Below(std::min<size_t>(16, b.size() - at)));
        }
        return;
      case 4:  // duplicate a range elsewhere
        if (!b.empty()) {
          const size_t at = Below(b.size());
          const Bytes chunk = b.substr(at, 1 + Below(32));
          b.insert(Below(b.size() + 1), chunk);
        }
        return;
      case 5:  // truncate
        b.resize(Below(b.size() + 1));
        return;
      case 6: {  // an interesting integer over the input
        static constexpr size_t kWidths[] = {1, 2, 4, 8};
        const size_t width = kWidths[Below(std::size(kWidths))];
        if (b.size() < width) return;
        const size_t at = Below(b.size() - width + 1);
        const uint64_t value = InterestingInteger();
        const bool big_endian = Below(2) == 0;
        for (size_t i = 0; i < width; ++i) {
          const size_t shift = 8 * (big_endian ? width - 1 - i : i);
          b[at + i] = static_cast<char>((value >> shift) & 0xff);
        }
        return;
      }
      case 7:  // a decimal number in the input
        ReplaceNumber(b);
        return;
      case 8: {  // splice in a piece of another input
        const Bytes& other = inputs_[Below(inputs_.size())];
        if (other.empty()) return;
        const size_t from = Below(other.size());
        const Bytes piece = other.substr(from, 1 + Below(64));
        const size_t at = Below(b.size() + 1);
        if (Below(2) == 0) {
          b.insert(at, piece);
        } else {
          b.replace(at, std::min(piece.size(), b.size() - at), piece);
        }
        return;
      }
      case 9:
      case 10: {  // a dictionary token, inserted or written over the input
        if (dictionary_.empty()) {
          b.insert(Below(b.size() + 1), 1, static_cast<char>(Below(256)));
          return;
        }
        const Bytes& token = dictionary_[Below(dictionary_.size())];
        const size_t at = Below(b.size() + 1);
        if (kind == 9) {
          b.insert(at, token);
        } else {
          b.replace(at, std::min(token.size(), b.size() - at), token);
        }
        return;
      }
    }
  }

  // Replaces a run of decimal digits in `text` with an interesting number; false when it has
  // none.
  bool ReplaceNumber(std::string& text) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < text.size(); ++i) {
      if (IsDigit(text[i]) && (i == 0 || !IsDigit(text[i - 1]))) starts.push_back(i);
    }
    if (starts.empty()) return false;
    const size_t at = starts[Below(starts.size())];
    size_t end = at;
    while (end < text.size() && IsDigit(text[end])) ++end;
    text.replace(at, end - at, kNumbers[Below(std::size(kNumbers))]);
    return true;
  }

  // --- safetensors: an 8-byte little-endian header size, the JSON header, the data.

  // Splits b into its header text and the rest when its header size fits; false otherwise.
  static bool Split(const Bytes& b, std::string& header, Bytes& data) {
    if (b.size() < 8) return false;
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    if (n > b.size() - 8) return false;
    header = b.substr(8, n);
    data = b.substr(8 + n);
    return true;
  }
  static Bytes Join(const std::string& header, const Bytes& data) {
    const uint64_t n = header.size();
    return Bytes(reinterpret_cast<const char*>(&n), 8) + header + data;
  }
  static void SetSize(Bytes& b, uint64_t n) {
    if (b.size() < 8) b.resize(8, '\0');
    std::memcpy(b.data(), &n, 8);
  }

  void MutateSafetensors(uint64_t kind, Bytes& b) {
    static constexpr std::string_view kDtypes[] = {"F32", "F16",     "BF16", "F64", "I64", "BOOL",
                                                   "F4",  "F6_E2M3", "C64",  "X",   ""};
    std::string header;
    Bytes data;
    switch (kind) {
      case 0: {  // a new header size
        const uint64_t actual = b.size() >= 8 ? b.size() - 8 : 0;
        const uint64_t sizes[] = {
            0,           1,           actual,       actual + 1,        actual - 1,
            100'000'000, 100'000'001, ~uint64_t{0}, uint64_t{1} << 63, rng_()};
        SetSize(b, sizes[Below(std::size(sizes))]);
        return;
      }
      case 1:
      case 2:  // a number in the header
        if (!Split(b, header, data)) return;
        if (ReplaceNumber(header)) b = Join(header, data);
        return;
      case 3: {  // a dtype in the header
        if (!Split(b, header, data)) return;
        const size_t key = header.find("\"dtype\":\"");
        if (key == std::string::npos) return;
        const size_t at = key + 9;
        const size_t end = header.find('"', at);
        if (end == std::string::npos) return;
        header.replace(at, end - at, kDtypes[Below(std::size(kDtypes))]);
        b = Join(header, data);
        return;
      }
      case 4: {  // grow or shrink the data region, the header size kept right
        if (!Split(b, header, data)) return;
        if (Below(2) == 0) {
          data.append(1 + Below(16), static_cast<char>(Below(256)));
        } else {
          data.resize(Below(data.size() + 1));
        }
        b = Join(header, data);
        return;
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>& inputs_;
  const std::vector<Bytes> dictionary_;
  const bool safetensors_;
};

}  // namespace

int main(int argc, char** argv) {
  long mutations = 5000;
  uint64_t seed = 1;
  bool safetensors = false;
  std::string artifact_prefix;
  std::vector<Bytes> dictionary;
  std::vector<Bytes> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--mutations=")) {
      mutations = std::strtol(argv[i] + 12, nullptr, 10);
    } else if (arg.starts_with("--seed=")) {
      seed = std::strtoull(argv[i] + 7, nullptr, 10);
    } else if (arg.starts_with("--format=")) {
      if (arg != "--format=safetensors") {
        std::fprintf(stderr, "%s: unknown format %s (known: safetensors)\n", argv[0], argv[i] + 9);
        return 2;
      }
      safetensors = true;
    } else if (arg.starts_with("--artifact_prefix=")) {
      artifact_prefix = argv[i] + 18;
    } else if (arg.starts_with("--dict=")) {
      std::optional<std::vector<Bytes>> tokens = ReadDictionary(argv[i] + 7);
      if (!tokens.has_value()) {
        std::fprintf(stderr, "cannot read the dictionary %s\n", argv[i] + 7);
        return 2;
      }
      dictionary = *std::move(tokens);
    } else if (!ReadInputs(argv[i], inputs)) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--mutations=N] [--seed=S] [--format=safetensors] [--dict=FILE] "
                 "[--artifact_prefix=P] PATH...: no input found\n",
                 argv[0]);
    return 2;
  }
  WriteInputsOnDeath();
  const std::string prefix = artifact_prefix + "crash-replay-" + std::to_string(seed) + "-";
  for (size_t i = 0; i < inputs.size(); ++i) Run(inputs[i], prefix + "input-" + std::to_string(i));
  Mutator mutator(seed, inputs, std::move(dictionary), safetensors);
  for (long i = 0; i < mutations; ++i) {
    Run(mutator.Mutate(inputs[i % inputs.size()]), prefix + std::to_string(i));
  }
  std::printf("ran %zu inputs and %ld mutations of them\n", inputs.size(), mutations);
  return 0;
}
