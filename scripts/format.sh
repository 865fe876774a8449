#!/usr/bin/env bash
# Formats Monta's C++ and proto sources with the repository's .clang-format
# (Debian's clang-format 14; set CLANG_FORMAT to use another).
#   scripts/format.sh          # rewrite every file in place
#   scripts/format.sh --check  # rewrite nothing; list the files that differ, exit 1 if any
# Files: every .cc, .h and .proto that git tracks or would track (untracked but
# not ignored), so new files are checked before their first commit.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *)
    echo "usage: scripts/format.sh [--check]" >&2
    exit 2
    ;;
esac

clang_format="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found (Debian: apt-get install clang-format-14)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
  '*.cc' '*.h' '*.proto' | sort -u)

if ((check == 0)); then
  # Skips files deleted in the working tree but still in the index.
  for f in "${files[@]}"; do
    [[ -f "$f" ]] && "$clang_format" -i --style=file "$f"
  done
  echo "format: ${#files[@]} files formatted"
  exit 0
fi

differ=0
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  if ! "$clang_format" --style=file "$f" | cmp -s - "$f"; then
    echo "$f"
    differ=$((differ + 1))
  fi
done
if ((differ > 0)); then
  echo "format: ${differ} of ${#files[@]} files differ from .clang-format; run scripts/format.sh" >&2
  exit 1
fi
echo "format: ${#files[@]} files match .clang-format"
