// A main for fuzz targets where libFuzzer is not available (GCC builds, CI): runs every input
// given, then deterministic mutations of them, through LLVMFuzzerTestOneInput. Built with ASan
// and UBSan (tests/fuzz/CMakeLists.txt), a bad access aborts the run and fails its test.
//
//   <replay> [--mutations=N] [--seed=S] PATH...
// PATH: a file, or a directory whose regular files are all read (sorted by name). N (default
// 5000) mutants are made with a fixed-seed std::mt19937_64 (S, default 1), from the inputs in
// turn, each by one to four of: a bit flip, an interesting byte, inserted or deleted or duplicated
// bytes, a truncation, a new header size (the first 8 bytes as a little-endian u64), and, in the
// JSON header, a number or a dtype swapped for an interesting one with the header size fixed up.
// Exits 0 when every input ran; 2 on a usage error or when no input was found.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::string;

// As libFuzzer does, hands the target a heap block of exactly the input's size, so that ASan sees
// a read one byte past the end (a std::string has slack and a terminating NUL after its bytes).
void Run(const Bytes& input) {
  const std::vector<uint8_t> exact(input.begin(), input.end());
  LLVMFuzzerTestOneInput(exact.data(), exact.size());
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

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  Bytes Mutate(Bytes b) {
    const int steps = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < steps; ++i) MutateOnce(b);
    return b;
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

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
  void SetSize(Bytes& b, uint64_t n) {
    if (b.size() < 8) b.resize(8, '\0');
    std::memcpy(b.data(), &n, 8);
  }

  void MutateOnce(Bytes& b) {
    static constexpr char kBytes[] = {'\0', '\xff', '{', '}', '[', ']', '"',  ',',    ':',
                                      ' ',  '0',    '9', '-', '.', 'e', '\\', '\x80', '\x7f'};
    static constexpr std::string_view kNumbers[] = {"0",
                                                    "1",
                                                    "4",
                                                    "8",
                                                    "-1",
                                                    "-0",
                                                    "1.5",
                                                    "1e400",
                                                    "4294967296",
                                                    "274877906944",
                                                    "9223372036854775807",
                                                    "9223372036854775808",
                                                    "18446744073709551615",
                                                    "18446744073709551616",
                                                    "99999999999999999999999"};
    static constexpr std::string_view kDtypes[] = {"F32", "F16",     "BF16", "F64", "I64", "BOOL",
                                                   "F4",  "F6_E2M3", "C64",  "X",   ""};
    std::string header;
    Bytes data;
    switch (Below(11)) {
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
      case 6: {  // a new header size
        const uint64_t actual = b.size() >= 8 ? b.size() - 8 : 0;
        const uint64_t sizes[] = {
            0,           1,           actual,       actual + 1,        actual - 1,
            100'000'000, 100'000'001, ~uint64_t{0}, uint64_t{1} << 63, rng_()};
        SetSize(b, sizes[Below(std::size(sizes))]);
        return;
      }
      case 7:
      case 8: {  // a number in the header
        if (!Split(b, header, data)) return;
        std::vector<size_t> starts;
        for (size_t i = 0; i < header.size(); ++i) {
          const bool digit = header[i] >= '0' && header[i] <= '9';
          if (digit && (i == 0 || header[i - 1] < '0' || header[i - 1] > '9')) starts.push_back(i);
        }
        if (starts.empty()) return;
        const size_t at = starts[Below(starts.size())];
        size_t end = at;
        while (end < header.size() && header[end] >= '0' && header[end] <= '9') ++end;
        header.replace(at, end - at, kNumbers[Below(std::size(kNumbers))]);
        b = Join(header, data);
        return;
      }
      case 9: {  // a dtype in the header
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
      case 10: {  // grow or shrink the data region, the header size kept right
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
};

}  // namespace

int main(int argc, char** argv) {
  long mutations = 5000;
  uint64_t seed = 1;
  std::vector<Bytes> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--mutations=")) {
      mutations = std::strtol(argv[i] + 12, nullptr, 10);
    } else if (arg.starts_with("--seed=")) {
      seed = std::strtoull(argv[i] + 7, nullptr, 10);
    } else if (!ReadInputs(argv[i], inputs)) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations=N] [--seed=S] PATH...: no input found\n", argv[0]);
    return 2;
  }
  for (const Bytes& input : inputs) Run(input);
  Mutator mutator(seed);
  for (long i = 0; i < mutations; ++i) Run(mutator.Mutate(inputs[i % inputs.size()]));
  std::printf("ran %zu inputs and %ld mutations of them\n", inputs.size(), mutations);
  return 0;
}
