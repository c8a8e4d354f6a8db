#!/usr/bin/env bash
# Runs the RUN: lines of a .test file, FileCheck-style: %moejit = the CLI, %FileCheck = FileCheck,
# %s = the test file, %t = a scratch cache directory for this test.
set -euo pipefail
test_file=$1 moejit=$2 filecheck=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export MOEJIT_CACHE_DIR=$scratch/cache
found=0
while IFS= read -r line; do
  cmd=${line#*RUN: }
  cmd=${cmd//%moejit/$moejit}
  cmd=${cmd//%FileCheck/$filecheck}
  cmd=${cmd//%s/$test_file}
  cmd=${cmd//%t/$scratch}
  found=1
  echo "RUN: $cmd"
  bash -o pipefail -c "$cmd"
done < <(grep -E '^(#|//) RUN: ' "$test_file")
[ "$found" = 1 ] || { echo "no RUN: lines in $test_file"; exit 1; }
