// Plain-text tables for montactl: left-aligned columns separated by two spaces,
// like kubectl's default output.
#ifndef MONTA_CLIENT_TABLE_H_
#define MONTA_CLIENT_TABLE_H_

#include <string>
#include <vector>

namespace monta::client {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  // Rows shorter than the header are padded with empty cells.
  void AddRow(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// "3.2s", "4m10s", "2h5m": short ages for tables.
std::string ShortDuration(double seconds);
// 1536 -> "1.5 KiB", 64 << 20 -> "64 MiB".
std::string HumanBytes(double bytes);
// 4.2e-5 -> "42.0 us", 3.6e-3 -> "3.618 ms", 2.5 -> "2.500 s"; "-" for <= 0.
std::string HumanSeconds(double seconds);

}  // namespace monta::client

#endif  // MONTA_CLIENT_TABLE_H_
