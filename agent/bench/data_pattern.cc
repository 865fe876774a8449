#include "agent/bench/data_pattern.h"

#include <cstring>

namespace monta::bench {
namespace {

// splitmix64: cheap, and every input bit moves every output bit, so
// neighbouring rows, ranks and words get unrelated bytes.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t RowSeed(int src, int dst, uint64_t row) {
  return Mix((static_cast<uint64_t>(src) << 48) ^
             (static_cast<uint64_t>(dst) << 32) ^ Mix(row));
}

}  // namespace

void FillRow(uint8_t* out, int src, int dst, uint64_t row, size_t row_bytes) {
  const uint64_t seed = RowSeed(src, dst, row);
  size_t offset = 0;
  for (uint64_t word = 0; offset < row_bytes; ++word) {
    const uint64_t value = Mix(seed + word);
    const size_t n = row_bytes - offset < 8 ? row_bytes - offset : 8;
    std::memcpy(out + offset, &value, n);
    offset += n;
  }
}

uint64_t CountWrongInRow(const uint8_t* got, int src, int dst, uint64_t row,
                         size_t row_bytes) {
  const uint64_t seed = RowSeed(src, dst, row);
  uint64_t wrong = 0;
  size_t offset = 0;
  for (uint64_t word = 0; offset < row_bytes; ++word) {
    const uint64_t value = Mix(seed + word);
    const size_t n = row_bytes - offset < 8 ? row_bytes - offset : 8;
    uint8_t expected[8];
    std::memcpy(expected, &value, 8);
    if (std::memcmp(expected, got + offset, n) != 0) {
      for (size_t i = 0; i < n; ++i) wrong += expected[i] != got[offset + i];
    }
    offset += n;
  }
  return wrong;
}

}  // namespace monta::bench
