// A file written by SafetensorsWriter, read by the reference Python package (safetensors +
// numpy). Skipped when python3 or those packages are missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "io_test_util.h"
#include "nmsparse/io/safetensors.h"

namespace nms {
namespace {

using testing_io::ScratchDir;
using testing_io::to_bytes;

bool python_has_safetensors() {
  return std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") == 0;
}

// Runs `command`, returns its stdout; `status` gets the exit status.
std::string run(const std::string& command, int& status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    status = -1;
    return out;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  status = ::pclose(pipe);
  return out;
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const std::byte b : bytes) {
    out += kHex[static_cast<unsigned>(b) >> 4];
    out += kHex[static_cast<unsigned>(b) & 0xf];
  }
  return out;
}

// Prints metadata and every tensor (sorted by name) the way the reference package sees them;
// for numpy-supported dtypes also checks that numpy's view has the same bytes.
constexpr const char* kReadScript = R"PY(
import sys
import numpy as np
from safetensors import deserialize, safe_open
path = sys.argv[1]
with safe_open(path, framework="numpy") as f:
    for k, v in sorted((f.metadata() or {}).items()):
        print("meta", k, v)
with open(path, "rb") as f:
    data = f.read()
numpy_dtypes = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
                "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
for name, t in sorted(deserialize(data)):
    shape = ",".join(str(d) for d in t["shape"])
    raw = bytes(t["data"])
    if t["dtype"] in numpy_dtypes:
        arr = np.frombuffer(raw, dtype=numpy_dtypes[t["dtype"]]).reshape(t["shape"])
        assert arr.tobytes() == raw
    print("tensor", name, t["dtype"], "[" + shape + "]", raw.hex())
)PY";

TEST(PythonInterop, ReferencePackageReadsOurFile) {
  if (!python_has_safetensors()) GTEST_SKIP() << "python3 with safetensors + numpy not available";
  ScratchDir dir;
  const auto path = dir / "ours.safetensors";
  std::vector<TensorData> tensors;
  tensors.push_back({{"z.f64", DType::kF64, {2}}, to_bytes<double>({1.5, -1e300})});
  tensors.push_back({{"y.f32", DType::kF32, {2, 2}}, to_bytes<float>({1, 2, 3, 4})});
  tensors.push_back({{"x.f16", DType::kF16, {3}}, to_bytes<uint16_t>({0x3c00, 0x7c00, 0x8001})});
  tensors.push_back({{"w.bf16", DType::kBF16, {1, 3}}, to_bytes<uint16_t>({0x3f80, 0xc060, 1})});
  tensors.push_back({{"v.i64", DType::kI64, {1}}, to_bytes<int64_t>({-5})});
  tensors.push_back({{"u.i32", DType::kI32, {2}}, to_bytes<int32_t>({7, -8})});
  tensors.push_back({{"t.i16", DType::kI16, {1}}, to_bytes<int16_t>({-300})});
  tensors.push_back({{"s.i8", DType::kI8, {2}}, to_bytes<int8_t>({-1, 1})});
  tensors.push_back({{"r.u8", DType::kU8, {3}}, to_bytes<uint8_t>({0, 1, 255})});
  tensors.push_back({{"q.bool", DType::kBool, {2}}, to_bytes<uint8_t>({1, 0})});
  tensors.push_back({{"p.scalar", DType::kF32, {}}, to_bytes<float>({0.25f})});
  tensors.push_back({{"o.empty", DType::kF32, {3, 0}}, {}});
  tensors.push_back({{"n.odd", DType::kU8, {1}}, to_bytes<uint8_t>({42})});  // unaligned next
  tensors.push_back({{"m.after_odd", DType::kF32, {1}}, to_bytes<float>({-1.0f})});
  write_safetensors(path, tensors, {{"format", "pt"}, {"producer", "nmsparse"}});

  testing_io::write_text(dir / "read.py", kReadScript);
  int status = 0;
  const std::string out =
      run("python3 " + (dir / "read.py").string() + " " + path.string() + " 2>&1", status);
  ASSERT_EQ(status, 0) << out;

  std::vector<const TensorData*> sorted;
  for (const TensorData& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorData* a, const TensorData* b) { return a->spec.name < b->spec.name; });
  std::ostringstream expected;
  expected << "meta format pt\nmeta producer nmsparse\n";
  for (const TensorData* t : sorted) {
    expected << "tensor " << t->spec.name << " " << dtype_name(t->spec.dtype) << " [";
    for (size_t i = 0; i < t->spec.shape.size(); ++i) {
      expected << (i ? "," : "") << t->spec.shape[i];
    }
    expected << "] " << hex(t->bytes) << "\n";
  }
  EXPECT_EQ(out, expected.str());
}

TEST(PythonInterop, WeReadWhatTheReferencePackageWrites) {
  if (!python_has_safetensors()) GTEST_SKIP() << "python3 with safetensors + numpy not available";
  ScratchDir dir;
  const auto path = dir / "theirs.safetensors";
  const std::string script = R"PY(
import sys
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(1234)
t = {"a": rng.standard_normal((17, 5)).astype(np.float32),
     "b": rng.standard_normal((9,)).astype(np.float16),
     "c": rng.integers(-1000, 1000, size=(4, 4)).astype(np.int64)}
save_file(t, sys.argv[1], metadata={"k": "v"})
for name in sorted(t):
    print(name, t[name].tobytes().hex())
)PY";
  testing_io::write_text(dir / "write.py", script);
  int status = 0;
  const std::string out =
      run("python3 " + (dir / "write.py").string() + " " + path.string() + " 2>&1", status);
  ASSERT_EQ(status, 0) << out;
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata().at("k"), "v");
  std::ostringstream ours;
  for (const char* name : {"a", "b", "c"})
    ours << name << " " << hex(file.raw(file.at(name))) << "\n";
  EXPECT_EQ(ours.str(), out);
  EXPECT_EQ(file.at("a").shape, (std::vector<int64_t>{17, 5}));
  EXPECT_EQ(file.read_f32(file.at("b")).size(), 9u);
}

}  // namespace
}  // namespace nms
