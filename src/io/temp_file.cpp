#include "io/temp_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "nmsparse/core/error.h"
#include "nmsparse/io/atomic_file.h"

namespace nms::detail {
namespace {

std::atomic<uint64_t> g_temp_counter{0};

std::filesystem::path directory_of(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

// Temporary files of uncommitted outputs, for the interrupt handler (install_interrupt_cleanup).
// Fixed-size slots with atomic flags: the handler only reads flags and calls unlink, both
// async-signal-safe. A path that does not fit, or a full table, only loses the cleanup on signal.
namespace {

constexpr int kTempSlots = 64;
constexpr size_t kTempPathMax = 4096;

struct TempSlot {
  std::atomic<bool> used{false};
  char path[kTempPathMax] = {};
};

TempSlot g_temp_slots[kTempSlots];
std::mutex g_temp_mutex;  // serialises register/unregister (never taken in the handler)

void register_temp(const std::filesystem::path& path) {
  const std::string& p = path.native();
  if (p.size() >= kTempPathMax) return;
  std::lock_guard<std::mutex> lock(g_temp_mutex);
  for (TempSlot& slot : g_temp_slots) {
    if (!slot.used.load(std::memory_order_relaxed)) {
      std::memcpy(slot.path, p.c_str(), p.size() + 1);
      slot.used.store(true, std::memory_order_release);
      return;
    }
  }
}

void unregister_temp(const std::filesystem::path& path) {
  std::lock_guard<std::mutex> lock(g_temp_mutex);
  for (TempSlot& slot : g_temp_slots) {
    if (slot.used.load(std::memory_order_relaxed) && path.native() == slot.path) {
      slot.used.store(false, std::memory_order_release);
      return;
    }
  }
}

extern "C" void remove_temps_and_reraise(int sig) {
  for (TempSlot& slot : g_temp_slots) {
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.path);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

AtomicOutput AtomicOutput::create(const std::filesystem::path& final_path, std::string context) {
  AtomicOutput out;
  out.context_ = std::move(context);
  out.final_path_ = final_path;
  if (final_path.empty() || !final_path.has_filename()) {
    throw Error(concat(out.context_, ": output path has no file name"));
  }
  struct stat st {};
  if (::stat(final_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw Error(concat(out.context_, ": is a directory"));
  }
  const std::filesystem::path dir = directory_of(final_path);
  // Built with append: GCC 12 emits a false -Wrestrict for chained operator+ on strings.
  std::string stem = ".";
  stem.append(final_path.filename().string()).append(".tmp.");
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = stem;
    name.append(std::to_string(::getpid())).append(".").append(std::to_string(g_temp_counter++));
    const std::filesystem::path candidate = dir / name;
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      out.fd_ = fd;
      out.temp_path_ = candidate;
      register_temp(out.temp_path_);
      return out;
    }
    const int err = errno;
    if (err != EEXIST) {
      throw Error(concat(out.context_, ": cannot create a temporary file in ", dir.string(), ": ",
                         std::strerror(err)));
    }
  }
  throw Error(concat(out.context_, ": cannot find a free temporary file name in ", dir.string()));
}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      final_path_(std::move(other.final_path_)),
      temp_path_(std::exchange(other.temp_path_, {})),
      context_(std::move(other.context_)) {}

AtomicOutput& AtomicOutput::operator=(AtomicOutput&& other) noexcept {
  if (this != &other) {
    discard();
    fd_ = std::exchange(other.fd_, -1);
    final_path_ = std::move(other.final_path_);
    temp_path_ = std::exchange(other.temp_path_, {});
    context_ = std::move(other.context_);
  }
  return *this;
}

AtomicOutput::~AtomicOutput() {
  discard();
}

void AtomicOutput::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    unregister_temp(temp_path_);
  }
  temp_path_.clear();
}

void AtomicOutput::fail(std::string_view what, int err) {
  discard();
  throw Error(concat(context_, ": ", what, ": ", std::strerror(err)));
}

void AtomicOutput::resize(uint64_t size) {
  NMS_CHECK(fd_ >= 0, context_, ": output already committed or discarded");
  NMS_CHECK(size <= static_cast<uint64_t>(std::numeric_limits<off_t>::max()), context_,
            ": file size ", size, " too large");
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    fail("cannot resize the temporary file", errno);
}

void AtomicOutput::write_at(uint64_t offset, std::span<const std::byte> data) {
  NMS_CHECK(fd_ >= 0, context_, ": output already committed or discarded");
  const std::byte* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    NMS_CHECK(offset <= static_cast<uint64_t>(std::numeric_limits<off_t>::max()), context_,
              ": offset ", offset, " too large");
    const ssize_t n = ::pwrite(fd_, p, left, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write the temporary file", errno);
    }
    if (n == 0) fail("cannot write the temporary file", EIO);
    p += n;
    left -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void AtomicOutput::commit() {
  NMS_CHECK(fd_ >= 0, context_, ": output already committed or discarded");
  if (::fsync(fd_) != 0) fail("cannot fsync the temporary file", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("cannot close the temporary file", errno);
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    fail("cannot rename the temporary file over the destination", errno);
  }
  unregister_temp(temp_path_);
  temp_path_.clear();  // now the destination: never unlink it
  // Make the rename itself durable.
  const std::filesystem::path dir = directory_of(final_path_);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail(concat("cannot open directory ", dir.string(), " to fsync it"), errno);
  const int rc = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  // Some file systems cannot fsync directories (EINVAL); the data itself is already synced.
  if (rc != 0 && err != EINVAL) fail(concat("cannot fsync directory ", dir.string()), err);
}

}  // namespace nms::detail

namespace nms {

void install_interrupt_cleanup() {
  struct sigaction action = {};
  action.sa_handler = detail::remove_temps_and_reraise;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
}

}  // namespace nms
