#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and fuzzes them for SECONDS
# in all, split evenly between the targets run (all of them by default, in this order):
#   safetensors  the safetensors reader      (corpus fuzz/corpus/safetensors/, fuzz/safetensors.dict)
#   datasets     the IDX and Austen parsers  (corpus fuzz/corpus/datasets/, fuzz/datasets.dict)
#   calibration  calibration files           (corpus fuzz/corpus/calibration/, fuzz/calibration.dict)
# Each seed corpus is copied into a scratch directory under build-fuzz/fuzz-run/<target>/, so the
# repository stays clean. Exits non-zero if a fuzzer finds a crash; the reproducer is then left in
# build-fuzz/fuzz-run/<target>/artifacts/ (replay it by passing the file to
# build-fuzz/fuzz/fuzz_<target>).
#   scripts/fuzz.sh SECONDS [TARGET...]
# Environment: NMS_FUZZ_JOBS (build parallelism, default 2), NMS_FUZZ_FORK (run N fuzzing
# processes with -fork=N instead of one).
set -euo pipefail

all_targets=(safetensors datasets calibration)
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...]   (targets: ${all_targets[*]})" >&2
  exit 2
fi
seconds=$1
shift
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t'" >&2; exit 2; }
done
share=$((seconds / ${#targets[@]}))
((share >= 1)) || share=1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-fuzz"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DNMS_BUILD_FUZZERS=ON -DNMS_BUILD_TESTS=OFF -DNMS_BUILD_BENCHMARKS=OFF -DNMS_BUILD_TOOLS=OFF \
  >/dev/null
cmake --build "$build" --target "${targets[@]/#/fuzz_}" --parallel "${NMS_FUZZ_JOBS:-2}"

# fuzz_one TARGET: runs build-fuzz/fuzz/fuzz_TARGET for $share seconds on a copy of its corpus.
fuzz_one() {
  local target=$1
  local work="$build/fuzz-run/$target"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$root/fuzz/corpus/$target"/* "$work/corpus/"
  local args=(-max_total_time="$share" -timeout=10 -rss_limit_mb=2048 -max_len=65536
              -dict="$root/fuzz/$target.dict" -artifact_prefix="$work/artifacts/"
              -print_final_stats=1)
  if [[ -n "${NMS_FUZZ_FORK:-}" ]]; then
    args+=(-fork="$NMS_FUZZ_FORK")
  fi
  echo "== fuzz.sh: fuzz_$target for ${share}s ==" >&2
  local status=0
  (cd "$work" && "$build/fuzz/fuzz_$target" "${args[@]}" "$work/corpus") || status=$?
  if [[ $status -ne 0 ]]; then
    echo "fuzz.sh: fuzz_$target failed (exit $status); reproducers:" >&2
    ls -l "$work/artifacts" >&2 || true
    return "$status"
  fi
  if compgen -G "$work/artifacts/*" >/dev/null; then
    echo "fuzz.sh: fuzz_$target wrote artifacts:" >&2
    ls -l "$work/artifacts" >&2
    return 1
  fi
}

rm -rf "$build/fuzz-run"
for t in "${targets[@]}"; do
  fuzz_one "$t"
done
echo "fuzz.sh: no crash in ${seconds}s (${targets[*]}, ${share}s each)"
