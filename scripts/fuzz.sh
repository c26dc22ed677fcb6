#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and fuzzes the safetensors
# reader for SECONDS. The seed corpus (fuzz/corpus/safetensors/) is copied into a scratch directory
# under build-fuzz/, so the repository stays clean. Exits non-zero if the fuzzer finds a crash;
# the reproducer is then left in build-fuzz/fuzz-run/artifacts/ (replay it by passing the file to
# build-fuzz/fuzz/fuzz_safetensors).
#   scripts/fuzz.sh SECONDS
# Environment: NMS_FUZZ_JOBS (build parallelism, default 2), NMS_FUZZ_FORK (run N fuzzing
# processes with -fork=N instead of one).
set -euo pipefail

if [[ $# -ne 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS" >&2
  exit 2
fi
seconds=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-fuzz"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DNMS_BUILD_FUZZERS=ON -DNMS_BUILD_TESTS=OFF -DNMS_BUILD_BENCHMARKS=OFF -DNMS_BUILD_TOOLS=OFF \
  >/dev/null
cmake --build "$build" --target fuzz_safetensors --parallel "${NMS_FUZZ_JOBS:-2}"

work="$build/fuzz-run"
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/fuzz/corpus/safetensors/* "$work/corpus/"

args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536
      -dict="$root/fuzz/safetensors.dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1)
if [[ -n "${NMS_FUZZ_FORK:-}" ]]; then
  args+=(-fork="$NMS_FUZZ_FORK")
fi

status=0
(cd "$work" && "$build/fuzz/fuzz_safetensors" "${args[@]}" "$work/corpus") || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: fuzzer failed (exit $status); reproducers:" >&2
  ls -l "$work/artifacts" >&2 || true
  exit "$status"
fi
if compgen -G "$work/artifacts/*" >/dev/null; then
  echo "fuzz.sh: artifacts were written:" >&2
  ls -l "$work/artifacts" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
