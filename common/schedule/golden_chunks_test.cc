// The committed golden vectors are what the chunk rule computes now (a
// change to the rule without regenerating them fails here, and python/monta
// is checked against the same file), and they say what the rule promises:
// chunks cover each TP rank's rows exactly, in order, with K_eff of them.
#include "common/schedule/golden_chunks.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/schedule/schedule.h"
#include "gtest/gtest.h"

namespace monta::schedule {
namespace {

std::string ReadCommitted() {
  // Tests run in the runfiles tree, where the workspace path resolves.
  std::ifstream in(kGoldenChunksPath, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(GoldenChunks, CommittedFileIsWhatTheRuleComputes) {
  const std::string committed = ReadCommitted();
  ASSERT_FALSE(committed.empty()) << kGoldenChunksPath << " is missing";
  const std::string now = GoldenChunksTsv();
  if (committed == now) return;
  // Name the first line that differs.
  const std::vector<std::string> a = absl::StrSplit(committed, '\n');
  const std::vector<std::string> b = absl::StrSplit(now, '\n');
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "<none>";
    const std::string y = i < b.size() ? b[i] : "<none>";
    ASSERT_EQ(x, y) << kGoldenChunksPath << " line " << i + 1
                    << " is stale: the committed line first, the rule's "
                       "second; if the rule changed on purpose, run `bazel "
                       "run //common/schedule:update_golden_chunks` and "
                       "update python/monta to match";
  }
}

TEST(GoldenChunks, HasAThousandCasesOfEveryKind) {
  const std::vector<GoldenCase> cases = GoldenCases();
  EXPECT_GE(cases.size(), 1000u);
  int uneven_over_t = 0;
  int fewer_chunks_than_asked = 0;
  for (const GoldenCase& c : cases) {
    if (c.rows % c.tp != 0) ++uneven_over_t;
    const int64_t n = RowsPerTpRank(c.rows, c.tp);
    if (EffectiveChunks(n, c.chunks) < std::min(n, c.chunks)) {
      ++fewer_chunks_than_asked;
    }
  }
  EXPECT_GT(uneven_over_t, 100);            // padding is exercised
  EXPECT_GT(fewer_chunks_than_asked, 100);  // K_eff < K is exercised
}

// Decodes "3*3,1" into 3, 3, 3, 1.
std::vector<int64_t> Decode(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view run : absl::StrSplit(text, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(run, '*');
    int64_t value = 0;
    int64_t times = 1;
    EXPECT_TRUE(absl::SimpleAtoi(parts[0], &value)) << text;
    if (parts.size() > 1) {
      EXPECT_TRUE(absl::SimpleAtoi(parts[1], &times));
    }
    for (int64_t i = 0; i < times; ++i) out.push_back(value);
  }
  return out;
}

// What every line must say, from the definitions rather than the code: t
// pieces of n rows hold C (and no t-1 fewer do), the chunks add up to n, all
// but the last are ceil(n/K) long, and there are K_eff <= K of them.
TEST(GoldenChunks, EveryLineKeepsTheRulesPromises) {
  const std::vector<std::string> lines =
      absl::StrSplit(GoldenChunksTsv(), '\n', absl::SkipEmpty());
  int checked = 0;
  for (const std::string& line : lines) {
    if (line[0] == '#' || line.rfind("rows\t", 0) == 0) continue;
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    ASSERT_EQ(f.size(), 7u) << line;
    int64_t rows, k, t, padded, n, k_eff;
    ASSERT_TRUE(absl::SimpleAtoi(f[0], &rows) && absl::SimpleAtoi(f[1], &k) &&
                absl::SimpleAtoi(f[2], &t) && absl::SimpleAtoi(f[3], &padded) &&
                absl::SimpleAtoi(f[4], &n) && absl::SimpleAtoi(f[5], &k_eff))
        << line;
    SCOPED_TRACE(line);
    EXPECT_EQ(padded, n * t);
    EXPECT_GE(padded, rows);
    EXPECT_LT(padded - rows, t);
    const std::vector<int64_t> chunk_rows = Decode(f[6]);
    EXPECT_EQ(static_cast<int64_t>(chunk_rows.size()), k_eff);
    EXPECT_LE(k_eff, std::max<int64_t>(1, std::min(k, n)));
    int64_t sum = 0;
    const int64_t size = (n + std::min(k, n) - 1) / std::min(k, n);
    for (size_t i = 0; i < chunk_rows.size(); ++i) {
      sum += chunk_rows[i];
      if (i + 1 < chunk_rows.size()) {
        EXPECT_EQ(chunk_rows[i], size);
      }
      EXPECT_GE(chunk_rows[i], 1);
      EXPECT_LE(chunk_rows[i], size);
    }
    EXPECT_EQ(sum, n);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(GoldenCases().size()));
}

}  // namespace
}  // namespace monta::schedule
