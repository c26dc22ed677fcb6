// Safetensors files: a paranoid reader over mmap and a streaming, atomic writer.
//
// File layout (https://github.com/huggingface/safetensors, format version as of 0.4+):
//   [8 bytes]  N, little-endian uint64: length of the header
//   [N bytes]  header: a UTF-8 JSON object, may be padded at the end with spaces
//                {"__metadata__": {"key": "value", ...},            (optional, string -> string)
//                 "<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                 ...}
//   [rest]     data buffer; data_offsets are relative to its first byte
// Tensors are dense, row-major (C order), little-endian.
//
// Reader contract. SafetensorsFile::open / from_bytes validate the whole header before returning
// and throw nms::Error (message: "<function>: <file>: <defect, with the offending value>") when
//   - the file is shorter than 8 bytes, N > 100,000,000, or 8 + N exceeds the file size;
//   - the header is not one strict JSON object starting with '{' (invalid UTF-8, NUL bytes,
//     syntax errors, trailing non-whitespace and duplicate keys at any level are all rejected;
//     trailing JSON whitespace, i.e. the spaces writers pad with, is accepted; leading whitespace
//     is refused, as the format says the header MUST begin with '{', although the Rust reference
//     tolerates it);
//   - a tensor name is empty, or an entry is not an object with exactly "dtype" (a supported name,
//     see dtype.h), "shape" (array of non-negative integers whose product does not overflow
//     int64) and "data_offsets" ([begin, end] non-negative integers, begin <= end);
//   - end - begin != dtype_size * numel, or an offset lies outside the data buffer;
//   - the tensors, sorted by offset, do not tile the data buffer exactly: gaps, overlaps and
//     trailing bytes after the last tensor are all rejected (as the Rust reference does);
//   - "__metadata__" is not an object of string -> string.
// Names quoted in messages are escaped and truncated, so garbage bytes do not flood a terminal.
// A file that passes is safe to read through raw() and read_f32(): every span lies in the file.
//
// Memory: open() maps the file read-only (MAP_PRIVATE); only the pages actually read are loaded.
// The mapping lives as long as the SafetensorsFile (and moves with it); spans returned by raw()
// and TensorInfo pointers/references stay valid until it is destroyed. If another process truncates
// the file while it is mapped, reading the lost pages raises SIGBUS: that is outside this API's
// control. The host must be little-endian (checked at compile time).
//
// Writer contract. SafetensorsWriter writes the header (padded with spaces so that N % 8 == 0, so
// the data buffer starts 8-byte aligned) into a temporary file next to the destination, named
// ".<final name>.tmp.<unique suffix>", then accepts each tensor's bytes exactly once in any order,
// at the offsets fixed by the spec order. commit() fsyncs the file, renames it over the destination
// and fsyncs the directory. Until commit() succeeds the destination is untouched; if commit() is
// never reached (exception, early destruction) the temporary file is removed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nmsparse/io/dtype.h"

namespace nms {

// Header limit of the reference implementation (safetensors MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a 0-d (scalar) tensor
  int64_t numel = 0;           // product of shape (1 for a 0-d tensor, 0 if any dimension is 0)
  uint64_t data_offset = 0;    // absolute byte offset in the file (8 + N + begin)
  uint64_t byte_size = 0;      // numel * dtype_size(dtype)
};

// Read-only view of one .safetensors file. Movable, not copyable.
class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws nms::Error naming the file and the defect, or the errno
  // text when the file cannot be opened (missing, a directory, not a regular file, ...).
  static SafetensorsFile open(const std::filesystem::path& path);
  // Copies `bytes` and validates them like open(); `label` stands in for the file name in
  // messages and path(). Used by the fuzzer and tests.
  static SafetensorsFile from_bytes(std::span<const uint8_t> bytes, std::string label = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const;    // total bytes: 8 + N + data size
  uint64_t header_size() const;  // N (includes any padding)

  // Every tensor, ordered by data offset (ties, only possible for empty tensors, by name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws nms::Error naming the tensor and the file if absent.
  const TensorInfo& at(std::string_view name) const;
  // The "__metadata__" map; empty if the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes (byte_size of them; no alignment guarantee: use memcpy for typed access).
  // `info` must come from this file (checked against the file bounds).
  std::span<const std::byte> raw(const TensorInfo& info) const;
  // F64/F32/F16/BF16 converted to float (numel values, row-major). F64 values beyond the float
  // range become +-Inf. Integer and BOOL dtypes throw nms::Error naming the dtype and tensor.
  std::vector<float> read_f32(const TensorInfo& info) const;
  // Drops the tensor's pages from this process's resident memory (madvise MADV_DONTNEED on the
  // mapping); a later read maps them in again from the file. Streaming tools call it after each
  // tensor so that resident memory stays at one tensor, not the whole file. No-op for from_bytes().
  void release(const TensorInfo& info) const;
  // As read_f32, into caller storage; dst.size() must equal info.numel.
  void read_f32_into(const TensorInfo& info, std::span<float> dst) const;

 private:
  struct Storage;  // the mapping or the owned copy (src/io/safetensors_file.cpp)

  SafetensorsFile();
  static SafetensorsFile parse(std::unique_ptr<Storage> storage, std::filesystem::path label,
                               const char* function);

  std::filesystem::path path_;
  std::unique_ptr<Storage> storage_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a 0-d tensor
};

// Streaming atomic writer (see the file comment). Peak memory is the header plus whatever the
// caller holds; write_f32 converts in bounded chunks. Movable, not copyable.
class SafetensorsWriter {
 public:
  // Validates the specs (non-empty unique names other than "__metadata__", non-negative dims,
  // overflow-checked sizes) and the destination (not a directory; its directory must exist and be
  // writable), creates the temporary file and writes the header. Data is laid out in spec order.
  // Throws nms::Error naming the path (and strerror) or the offending spec.
  SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> specs,
                    std::map<std::string, std::string> metadata = {});
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();  // removes the temporary file if not committed; never throws

  // Raw little-endian bytes of tensor `name`; data.size() must equal its byte size. Each tensor
  // is written exactly once. Throws nms::Error on an unknown name, a second write, a size
  // mismatch, an I/O error, or after commit().
  void write(std::string_view name, std::span<const std::byte> data);
  // Converts `values` (numel of them, row-major) to the spec's float dtype (F32/F16/BF16/F64,
  // round-to-nearest-even when narrowing) and writes them. Integer/BOOL specs throw.
  void write_f32(std::string_view name, std::span<const float> values);
  // Throws if a tensor was not written; otherwise fsync, rename over the destination, fsync the
  // directory. On failure the temporary file is removed and the destination left as it was.
  void commit();

  const std::filesystem::path& path() const;
  // Path of the temporary file (empty after commit() or a failure). For tests and diagnostics.
  const std::filesystem::path& temp_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience for small files, every tensor in memory: specs and bytes are written in order.
struct TensorData {
  TensorSpec spec;
  std::vector<std::byte> bytes;
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace nms
