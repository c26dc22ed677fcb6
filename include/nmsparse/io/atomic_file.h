// Atomic whole-file writes.
//
// write_file_atomic writes `contents` to a temporary file in the same directory as `path`
// (".<file name>.tmp.<unique suffix>"), fsyncs it, renames it over `path` and fsyncs the directory.
// Readers see either the old file or the complete new one, never a partial file; if anything
// fails the temporary file is removed and `path` is left as it was.
// Throws nms::Error naming `path` (and the strerror text) when `path` is a directory, its
// directory does not exist or is not writable, or any write/fsync/rename fails.
#pragma once

#include <filesystem>
#include <string_view>

namespace nms {

void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// Installs SIGINT, SIGTERM and SIGHUP handlers that remove the temporary files of every output
// not yet committed (SafetensorsWriter, write_file_atomic), then re-raise the signal with its
// default action. For programs (the CLI) that want an interrupted run to leave nothing behind;
// a library never installs it by itself.
void install_interrupt_cleanup();

}  // namespace nms
