// How an error message repeats a caller's input: never whole. A name, key or
// id from a request can be megabytes (a 10 KB GetNode name once came back as
// "received initial metadata size exceeds limit" because the error repeated
// it), so every echoed input goes through EchoInput: in double quotes,
// C-escaped (control and non-ASCII bytes as \xNN), and cut to its first
// kMaxEchoBytes bytes with its length when longer.
#ifndef MONTA_COMMON_ECHO_H_
#define MONTA_COMMON_ECHO_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace monta {

// Bytes of an input an error message repeats at most (before escaping).
inline constexpr size_t kMaxEchoBytes = 128;

// "node-a", or for a longer input "aaaa...aaaa..." (10240 bytes): its first
// kMaxEchoBytes bytes and its length.
std::string EchoInput(absl::string_view input);

// Another library's error message that may quote the input it choked on
// (nlohmann's "...; last read: '<token>'", a job file's key path): whole when
// at most 2 x kMaxEchoBytes bytes, else its first 2 x kMaxEchoBytes bytes
// and its length; bytes outside printable ASCII as \xNN.
std::string CutMessage(absl::string_view message);

}  // namespace monta

#endif  // MONTA_COMMON_ECHO_H_
