#!/usr/bin/env bash
# The CUDA backend's GPU run: its tests (every GPU result against the CPU library) and its
# benchmark (nmsparse_cuda_bench), with the results as JSON in DIR. Meant for a machine with an
# NVIDIA GPU, in under 8 minutes (16 cores, H200).
#
#   scripts/gpu-check.sh --prepare     on a development machine (no GPU needed): installs
#                                      cuSPARSELt (install-deps --cuda) and builds the test and
#                                      the benchmark into build-gpu/ (sm_90)
#   scripts/gpu-check.sh DIR           on the GPU machine: uses build-gpu/ when its binaries are
#                                      there (carried), else configures and builds it there; then
#                                      runs the tests and the benchmark; writes into DIR
#                                      cuda_test.json (GoogleTest's report), bench.json
#                                      (nmsparse_cuda_bench), gpu-check.json (summary), logs
#   NMS_GPU_QUICK=1 scripts/gpu-check.sh DIR   the benchmark's --quick sizes
#   NMS_GPU_TEST_TIMEOUT / NMS_GPU_BENCH_TIMEOUT   seconds for the tests (240) and the benchmark
#                                      (330); the benchmark's JSON keeps every finished section
#
# cuSPARSELt is looked for in .deps/cusparselt, then in the Python packages (nvidia-cusparselt-
# cu13), then by ldconfig; without it the GEMM tests and benchmark say so and the rest runs.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=build-gpu
test_bin="$build/tests/cuda/cuda_test"
bench_bin="$build/bench/cuda/nmsparse_cuda_bench"

configure_and_build() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNMSPARSE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DNMS_TORCH=OFF -DNMS_BUILD_TOOLS=OFF \
    -DNMS_BUILD_BENCHMARKS=ON -DNMS_BUILD_TESTS=ON >"$1/configure.log" 2>&1 &&
    cmake --build "$build" --parallel "$(nproc)" --target cuda_test nmsparse_cuda_bench \
      >"$1/build.log" 2>&1
}

if [[ "${1:-}" == "--prepare" ]]; then
  scripts/install-deps.sh && scripts/install-deps.sh --cuda || exit 1
  mkdir -p "$build"
  configure_and_build "$build" || { tail -30 "$build/build.log" "$build/configure.log"; exit 1; }
  # A bare GPU machine may lack the compiler's OpenMP runtime; a copy travels with the build and
  # is looked up last, after the machine's own.
  mkdir -p "$build/runtime-libs"
  cp -L "$(gcc -print-file-name=libgomp.so.1)" "$build/runtime-libs/" || exit 1
  echo "gpu-check: built $test_bin and $bench_bin; carry build-gpu to the GPU machine and run"
  echo "           scripts/gpu-check.sh DIR there"
  exit 0
fi
[[ $# -eq 1 && "$1" != -* ]] || { sed -n 2,20p "$0"; exit 2; }
out="$1"
mkdir -p "$out"
start=$(date +%s)

if [[ ! -x "$test_bin" || ! -x "$bench_bin" ]]; then
  echo "gpu-check: no carried binaries in $build; building (nvcc, cmake, GoogleTest needed)" >&2
  configure_and_build "$out" || { echo "gpu-check: build failed, see $out/build.log" >&2; }
fi

# cuSPARSELt's shared library for the binaries (their RUNPATH points at the build machine).
lt_dir=""
for d in "$root/.deps/cusparselt/nvidia/cu13/lib" \
  $(python3 -c 'import nvidia, os; [print(os.path.join(p, "cu13", "lib")) for p in nvidia.__path__]' 2>/dev/null) \
  $(python3 -c 'import nvidia.cusparselt, os; [print(os.path.join(p, "lib")) for p in nvidia.cusparselt.__path__]' 2>/dev/null) \
  $(find /opt /usr/local /usr/lib -name 'libcusparseLt.so.0' -printf '%h\n' 2>/dev/null | head -1); do
  if [[ -f "$d/libcusparseLt.so.0" ]]; then lt_dir="$d"; break; fi
done
export LD_LIBRARY_PATH="${lt_dir:+$lt_dir:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$root/$build/runtime-libs"
echo "gpu-check: cuSPARSELt from '${lt_dir:-nowhere}'" >&2
for bin in "$test_bin" "$bench_bin"; do
  [[ -x "$bin" ]] && ldd "$bin" | grep "not found" | sed "s|^|gpu-check: $bin needs |" >&2
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv >"$out/nvidia-smi.csv" 2>&1

tests_rc=127
if [[ -x "$test_bin" ]]; then
  timeout "${NMS_GPU_TEST_TIMEOUT:-240}" "$test_bin" --gtest_output="json:$out/cuda_test.json" >"$out/cuda_test.log" 2>&1
  tests_rc=$?
  tail -25 "$out/cuda_test.log" >&2
fi
bench_rc=127
if [[ -x "$bench_bin" ]]; then
  quick=()
  [[ "${NMS_GPU_QUICK:-0}" == 1 ]] && quick=(--quick)
  timeout "${NMS_GPU_BENCH_TIMEOUT:-330}" "$bench_bin" "${quick[@]}" --json "$out/bench.json" >/dev/null 2>"$out/bench.log"
  bench_rc=$?
  cat "$out/bench.log" >&2
fi

python3 - "$out" "$tests_rc" "$bench_rc" "$(( $(date +%s) - start ))" <<'PY'
import json, os, sys
out, tests_rc, bench_rc, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
summary = {"tests_rc": tests_rc, "bench_rc": bench_rc, "seconds": seconds}
try:
    t = json.load(open(os.path.join(out, "cuda_test.json")))
    cases = [c for s in t.get("testsuites", []) for c in s.get("testsuite", [])]
    summary["tests"] = {
        "total": len(cases),
        "failed": [c["name"] for c in cases if c.get("failures")],
        "skipped": [c["name"] for c in cases if c.get("result") == "SKIPPED"],
    }
except (OSError, ValueError) as e:
    summary["tests"] = {"error": str(e)}
try:
    summary["bench"] = json.load(open(os.path.join(out, "bench.json")))
except (OSError, ValueError) as e:
    summary["bench"] = {"error": str(e)}
tmp = os.path.join(out, "gpu-check.json.tmp")
json.dump(summary, open(tmp, "w"), indent=2)
os.replace(tmp, os.path.join(out, "gpu-check.json"))
print(json.dumps({k: summary[k] for k in ("tests_rc", "bench_rc", "seconds", "tests")}, indent=2))
PY
[[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
