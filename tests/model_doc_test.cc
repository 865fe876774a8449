// docs/MODEL.md quotes `montactl plan` (the output blocks and the summary
// table of §9): this test starts the real planner, runs every quoted command
// through the real montactl and requires the quotes to match what it prints,
// digit for digit. A model change that moves a number fails here until the
// page says the new number.
//
// In MODEL.md, an output block is
//   <!-- doc-test: montactl plan ARGS -->
//   ```text
//   ...lines montactl plan ARGS prints, contiguous...
//   ```
// and the summary table follows `<!-- doc-test: plan summary -->`, one row
// per command: | `ARGS` | experts | chosen | chunks | per layer | flat per
// layer | vs flat |, every cell as montactl prints it.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace monta {
namespace {

using testing::LocalCluster;

constexpr char kBlockMarker[] = "<!-- doc-test: montactl plan ";
constexpr char kSummaryMarker[] = "<!-- doc-test: plan summary -->";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out = absl::StrSplit(text, '\n');
  for (std::string& line : out) {
    absl::StripTrailingAsciiWhitespace(&line);
  }
  return out;
}

struct Quote {
  std::string args;                // what follows `montactl plan`
  std::vector<std::string> lines;  // the quoted output
  int doc_line = 0;                // 1-based, for messages
};

// The output blocks of the page.
std::vector<Quote> Blocks(const std::vector<std::string>& doc) {
  std::vector<Quote> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    absl::string_view line = doc[i];
    if (!absl::ConsumePrefix(&line, kBlockMarker) ||
        !absl::ConsumeSuffix(&line, " -->")) {
      continue;
    }
    Quote q;
    q.args = std::string(line);
    q.doc_line = static_cast<int>(i + 1);
    size_t j = i + 1;
    EXPECT_TRUE(j < doc.size() && doc[j] == "```text")
        << "MODEL.md:" << j + 1 << ": a ```text block must follow the marker";
    for (++j; j < doc.size() && doc[j] != "```"; ++j) q.lines.push_back(doc[j]);
    out.push_back(std::move(q));
  }
  return out;
}

// The summary table's rows, cells trimmed (the first without backticks).
std::vector<std::vector<std::string>> SummaryRows(
    const std::vector<std::string>& doc) {
  std::vector<std::vector<std::string>> rows;
  size_t i = 0;
  while (i < doc.size() && doc[i] != kSummaryMarker) ++i;
  for (i += 3; i < doc.size() && absl::StartsWith(doc[i], "|"); ++i) {
    std::vector<std::string> cells =
        absl::StrSplit(absl::StripPrefix(doc[i], "|"), '|');
    if (!cells.empty() && cells.back().empty()) cells.pop_back();
    for (std::string& c : cells) {
      c = std::string(absl::StripAsciiWhitespace(c));
    }
    if (!cells.empty()) {
      cells[0] =
          std::string(absl::StripSuffix(absl::StripPrefix(cells[0], "`"), "`"));
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

class ModelDocTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartPlanner().ok()); }

  // `montactl plan ARGS` as printed, or a failure.
  std::string Plan(const std::string& args) {
    std::vector<std::string> argv = {"plan"};
    for (absl::string_view a : absl::StrSplit(args, ' ', absl::SkipEmpty())) {
      argv.emplace_back(a);
    }
    const testing::CommandResult r = cluster_.Montactl(argv);
    EXPECT_EQ(r.exit_code, 0) << "montactl plan " << args << ": " << r.err;
    return r.out;
  }

  LocalCluster cluster_;
};

// Every quoted block is a contiguous run of lines montactl prints.
TEST_F(ModelDocTest, QuotedPlansAreWhatMontactlPrints) {
  const std::vector<std::string> doc =
      Lines(testing::ReadFile(testing::Runfile("docs/MODEL.md")));
  const std::vector<Quote> quotes = Blocks(doc);
  ASSERT_GE(quotes.size(), 2u) << "MODEL.md quotes no montactl plan output";
  for (const Quote& q : quotes) {
    SCOPED_TRACE(
        absl::StrCat("MODEL.md:", q.doc_line, ": montactl plan ", q.args));
    ASSERT_FALSE(q.lines.empty());
    const std::vector<std::string> printed = Lines(Plan(q.args));
    size_t at = 0;
    while (at < printed.size() && printed[at] != q.lines[0]) ++at;
    ASSERT_LT(at, printed.size())
        << "first quoted line not printed: " << q.lines[0] << "\nprinted:\n"
        << absl::StrJoin(printed, "\n");
    for (size_t k = 0; k < q.lines.size(); ++k) {
      ASSERT_LT(at + k, printed.size()) << "quote runs past the output";
      EXPECT_EQ(q.lines[k], printed[at + k]) << "quoted line " << k + 1;
    }
  }
}

// The cells of one candidate row of montactl's table, split at the header's
// column starts.
std::vector<std::string> Cells(const std::string& header,
                               const std::string& row) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] != ' ' && (i == 0 || header[i - 1] == ' ')) {
      // A header name starts here unless it continues one ("PER STEP").
      if (i >= 2 && header[i - 2] != ' ') continue;
      starts.push_back(i);
    }
  }
  std::vector<std::string> cells = {row.substr(0, 1)};  // the chosen mark
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : row.size();
    cells.emplace_back(absl::StripAsciiWhitespace(
        starts[k] < row.size() ? row.substr(starts[k], end - starts[k]) : ""));
  }
  return cells;
}

TEST_F(ModelDocTest, SummaryTableIsWhatMontactlPrints) {
  const std::vector<std::string> doc =
      Lines(testing::ReadFile(testing::Runfile("docs/MODEL.md")));
  const std::vector<std::vector<std::string>> rows = SummaryRows(doc);
  ASSERT_GE(rows.size(), 2u) << "no summary table after " << kSummaryMarker;
  for (const std::vector<std::string>& row : rows) {
    ASSERT_EQ(row.size(), 7u) << absl::StrJoin(row, " | ");
    SCOPED_TRACE(absl::StrCat("montactl plan ", row[0]));
    const std::vector<std::string> printed = Lines(Plan(row[0]));
    std::string layout;
    std::string header;
    std::vector<std::string> chosen;
    std::vector<std::string> flat;
    for (const std::string& line : printed) {
      absl::string_view rest = line;
      if (absl::ConsumePrefix(&rest, "Experts priced as ")) {
        layout = std::string(rest.substr(0, rest.find(' ')));
      }
      if (absl::StrContains(line, "TOTAL/LAYER")) header = line;
      if (header.empty() || line.empty() || line == header) continue;
      if (line[0] != '*' && line[0] != ' ') continue;
      if (absl::StartsWith(line, "  infeasible")) continue;
      const std::vector<std::string> cells = Cells(header, line);
      if (cells.size() < 12) continue;
      if (cells[0] == "*") chosen = cells;
      if (cells[2] == "flat") flat = cells;
    }
    ASSERT_FALSE(chosen.empty() || flat.empty());
    // Columns: mark, rank, strategy, chunks, fwd, bwd, total, step, a2a+ag,
    // inter bytes, vs flat, bottleneck.
    EXPECT_EQ(row[1], layout);
    EXPECT_EQ(row[2], chosen[2]);
    EXPECT_EQ(row[3], chosen[3]);
    EXPECT_EQ(row[4], chosen[6]);
    EXPECT_EQ(row[5], flat[6]);
    EXPECT_EQ(row[6], chosen[10]);
  }
}

}  // namespace
}  // namespace monta
