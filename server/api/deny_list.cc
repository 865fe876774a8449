#include "server/api/deny_list.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/echo.h"
#include "server/registry/registry.h"

namespace monta::api {
namespace {

constexpr absl::string_view kNodePrefix = "node/";
constexpr absl::string_view kSerialPrefix = "serial=";
// RFC 5280: at most 20 octets; separators and leading zeros on top.
constexpr size_t kMaxSerialChars = 128;

absl::Status BadLine(int line, absl::string_view entry, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", line, ": ", why, ", got ", EchoInput(entry)));
}

}  // namespace

std::string NormalizeSerial(absl::string_view hex) {
  std::string out;
  for (const char c : hex) {
    if (c == ':') continue;
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return "";
    if (out.empty() && c == '0') continue;
    out.push_back(absl::ascii_toupper(static_cast<unsigned char>(c)));
  }
  if (out.empty() && absl::StrContains(hex, '0')) return "0";
  return out;
}

absl::StatusOr<DenyEntries> ParseDenyList(absl::string_view text) {
  if (text.size() > kMaxDenyListBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(text.size(), " bytes, at most ", kMaxDenyListBytes));
  }
  DenyEntries entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    const absl::string_view entry = absl::StripAsciiWhitespace(line);
    if (entry.empty()) continue;
    if (absl::StartsWith(entry, kSerialPrefix)) {
      const absl::string_view hex = entry.substr(kSerialPrefix.size());
      const std::string serial = NormalizeSerial(hex);
      if (serial.empty() || hex.size() > kMaxSerialChars) {
        return BadLine(line_number, entry,
                       "expected serial=<hex digits> as `openssl x509 "
                       "-noout -serial` prints it");
      }
      entries.serials.insert(serial);
    } else {
      absl::string_view name = entry;
      absl::ConsumePrefix(&name, kNodePrefix);
      if (absl::Status valid = registry::ValidateNodeName(name); !valid.ok()) {
        return BadLine(line_number, entry,
                       "expected node/<name>, <name> (a node name: 1..253 "
                       "of [a-z0-9.-]) or serial=<hex>");
      }
      entries.nodes.insert(std::string(name));
    }
    if (entries.size() > kMaxDenyListEntries) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": more than ",
                       kMaxDenyListEntries, " entries"));
    }
  }
  return entries;
}

DenyList::DenyList(std::string path, DenyEntries entries)
    : path_(std::move(path)), entries_(std::move(entries)) {}

absl::StatusOr<DenyEntries> DenyList::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("--deny_list_file ", path, ": cannot be read"));
  }
  // One byte past the bound is enough to refuse a file that is too large.
  std::string text(kMaxDenyListBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--deny_list_file ", path, ": cannot be read"));
  }
  absl::StatusOr<DenyEntries> entries = ParseDenyList(text);
  if (!entries.ok()) {
    return absl::Status(entries.status().code(),
                        absl::StrCat("--deny_list_file ", path, ": ",
                                     entries.status().message()));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<DenyList>> DenyList::Load(std::string path) {
  absl::StatusOr<DenyEntries> entries = Read(path);
  if (!entries.ok()) return entries.status();
  return std::unique_ptr<DenyList>(
      new DenyList(std::move(path), *std::move(entries)));
}

absl::StatusOr<bool> DenyList::Reload() {
  absl::StatusOr<DenyEntries> entries = Read(path_);
  if (!entries.ok()) return entries.status();
  absl::MutexLock lock(&mu_);
  if (*entries == entries_) return false;
  entries_ = *std::move(entries);
  return true;
}

std::optional<std::string> DenyList::Match(absl::string_view node_name,
                                           absl::string_view serial) const {
  absl::ReaderMutexLock lock(&mu_);
  if (!node_name.empty() && entries_.nodes.count(std::string(node_name)) > 0) {
    return absl::StrCat(kNodePrefix, node_name);
  }
  if (!serial.empty() && entries_.serials.count(std::string(serial)) > 0) {
    return absl::StrCat(kSerialPrefix, serial);
  }
  return std::nullopt;
}

bool DenyList::has_serials() const {
  absl::ReaderMutexLock lock(&mu_);
  return !entries_.serials.empty();
}

size_t DenyList::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace monta::api
