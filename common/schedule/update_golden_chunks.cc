// Rewrites common/schedule/testdata/golden_chunks.tsv in the workspace:
//   bazel run //common/schedule:update_golden_chunks
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "common/schedule/golden_chunks.h"

int main() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr) {
    std::cerr << "usage: bazel run //common/schedule:update_golden_chunks\n";
    return 2;
  }
  const std::string path =
      std::string(workspace) + "/" + monta::schedule::kGoldenChunksPath;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << monta::schedule::GoldenChunksTsv();
  out.close();
  if (!out) {
    std::cerr << path << ": cannot be written\n";
    return 1;
  }
  std::cout << "wrote " << monta::schedule::GoldenCases().size() << " cases to "
            << path << "\n";
  return 0;
}
