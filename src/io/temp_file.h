// PRIVATE header: the temporary file behind every atomic write of the io layer.
//
// AtomicOutput::create makes ".<final name>.tmp.<pid>.<n>" (mode 0666 & ~umask, O_EXCL) in the
// destination's directory, so the final rename never crosses file systems. Data goes in with
// write_at; commit() fsyncs the file, renames it over the destination and fsyncs the directory.
// Destroying an uncommitted AtomicOutput closes and unlinks the temporary file, so an exception
// anywhere before commit() leaves the destination as it was and no stray file behind.
// Every failure is an nms::Error "<context>: <what>: <strerror>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace nms::detail {

class AtomicOutput {
 public:
  // Refuses a destination that is an existing directory; the directory must exist and be
  // writable (the errno text is reported otherwise). `context` prefixes every message.
  static AtomicOutput create(const std::filesystem::path& final_path, std::string context);

  AtomicOutput(AtomicOutput&& other) noexcept;
  AtomicOutput& operator=(AtomicOutput&& other) noexcept;
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  ~AtomicOutput();

  // Sets the file length (holes read as zeros). Used to allow writes in any order.
  void resize(uint64_t size);
  // Writes all of `data` at byte `offset` (retries short writes and EINTR).
  void write_at(uint64_t offset, std::span<const std::byte> data);
  // fsync + close + rename over the destination + fsync of the directory. Afterwards the object
  // is inert. On failure the temporary file is removed and the error thrown.
  void commit();

  const std::filesystem::path& final_path() const { return final_path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }  // empty once finished
  const std::string& context() const { return context_; }

 private:
  AtomicOutput() = default;
  void discard() noexcept;  // close + unlink the temporary file
  [[noreturn]] void fail(std::string_view what, int err);

  int fd_ = -1;
  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  std::string context_;
};

}  // namespace nms::detail
