// main() for a fuzz harness outside libFuzzer: runs LLVMFuzzerTestOneInput once
// on every file named (directories: every file below them), so the GCC build
// compiles the harnesses and the suite replays each committed corpus. A crash
// or a failed check in the harness aborts, which fails the test.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: %s: cannot read\n", path.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (!std::filesystem::is_directory(arg, ec)) {
      files.push_back(arg);
      continue;
    }
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(arg, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input files (usage: %s FILE|DIR...)\n",
                 argv[0]);
    return 1;
  }
  int failed = 0;
  for (const auto& file : files) {
    if (!RunFile(file)) ++failed;
  }
  std::printf("replay: %zu inputs, %d unreadable\n", files.size(), failed);
  return failed == 0 ? 0 : 1;
}
