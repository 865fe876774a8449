#include "common/echo.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace monta {
namespace {

// Printable ASCII stays, every other byte becomes \xNN: a message keeps its
// quotes readable and carries no control characters.
std::string EscapeUnprintable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace

std::string EchoInput(absl::string_view input) {
  if (input.size() <= kMaxEchoBytes) {
    return absl::StrCat("\"", absl::CHexEscape(input), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(input.substr(0, kMaxEchoBytes)),
                      "...\" (", input.size(), " bytes)");
}

std::string CutMessage(absl::string_view message) {
  constexpr size_t kMaxBytes = 2 * kMaxEchoBytes;
  if (message.size() <= kMaxBytes) return EscapeUnprintable(message);
  return absl::StrCat(EscapeUnprintable(message.substr(0, kMaxBytes)), "... (",
                      message.size(), " bytes)");
}

}  // namespace monta
