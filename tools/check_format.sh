#!/usr/bin/env bash
# Fails when any C++/CUDA source differs from what clang-format (Google style,
# .clang-format) would write. Fix with: tools/check_format.sh --fix
set -uo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if ((${#files[@]} == 0)); then exit 0; fi
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/ringlab-format.log; then
  echo "error: these files are not clang-formatted (run tools/check_format.sh --fix):" >&2
  grep -o '^[^:]*:' /tmp/ringlab-format.log | sort -u | sed 's/:$//; s/^/  /' >&2
  exit 1
fi
