// nmsparse: the command-line tool. Argument parsing and error reporting only; every algorithm
// lives in the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <new>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/io/atomic_file.h"

namespace {
// A command that was not built in: it exists, accepts anything, and says how to get it.
[[maybe_unused]] void add_unavailable_command(CLI::App& app, int& exit_code, const char* name,
                                              const char* description, const char* packages) {
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->allow_extras();
  cmd->prefix_command();
  const std::string message = std::string(name) + ": built without " + packages +
                              " (or run scripts/install-deps.sh) and rebuild";
  cmd->callback([&exit_code, message] {
    exit_code = nms::cli::kExitBadInput;
    throw nms::Error(message);
  });
}
}  // namespace

#ifndef NMS_HAVE_TORCH
void nms::cli::add_train_command(CLI::App& app, int& exit_code) {
  add_unavailable_command(app, exit_code, "train", "Sparse training (needs LibTorch; not built in)",
                          "LibTorch: apt-get install libtorch-dev");
}
#endif

#ifndef NMS_HAVE_CALIBRATE
void nms::cli::add_calibrate_command(CLI::App& app, int& exit_code) {
  add_unavailable_command(app, exit_code, "calibrate",
                          "Calibration statistics of a trained model (needs LibTorch and OpenBLAS)",
                          "LibTorch or OpenBLAS: apt-get install libtorch-dev libopenblas-dev");
}
#endif

#ifndef NMS_HAVE_PRUNE
void nms::cli::add_prune_command(CLI::App& app, int& exit_code) {
  add_unavailable_command(app, exit_code, "prune",
                          "Post-training pruning (needs OpenBLAS: libopenblas-dev)",
                          "OpenBLAS: apt-get install libopenblas-dev");
}
#endif

int main(int argc, char** argv) {
  // Training and benchmarks mix our OpenMP regions with OpenBLAS and LibTorch on several threads:
  // start them with runtime settings that keep each from spinning on the others' cores.
  if (argc > 1 && (std::string(argv[1]) == "train" || std::string(argv[1]) == "bench")) {
    nms::reexec_with_thread_runtime_env(argv);
  }
  CLI::App app{
      "nmsparse: N:M sparse masks, verification and compressed formats for neural-network "
      "weights.\n"
      "N:M always means keep N of every M consecutive weights (2:4 = density 0.50 / sparsity "
      "0.50).\nInputs are safetensors files or sharded models (a model.safetensors.index.json or "
      "its directory)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "nmsparse 0.1.0");
  nms::install_interrupt_cleanup();  // Ctrl-C leaves neither a partial output nor a temp file
  int exit_code = nms::cli::kExitOk;
  nms::cli::add_info_command(app, exit_code);
  nms::cli::add_mask_command(app, exit_code);
  nms::cli::add_verify_command(app, exit_code);
  nms::cli::add_pack_command(app, exit_code);
  nms::cli::add_unpack_command(app, exit_code);
  nms::cli::add_generate_command(app, exit_code);
  nms::cli::add_bench_command(app, exit_code);
  nms::cli::add_gradprune_command(app, exit_code);
  nms::cli::add_train_command(app, exit_code);
  nms::cli::add_prune_command(app, exit_code);
  nms::cli::add_calibrate_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return nms::cli::kExitBadInput;
  } catch (const nms::Error& e) {
    std::fprintf(stderr, "nmsparse: error: %s\n", e.what());
    return nms::cli::kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "nmsparse: error: out of memory\n");
    return nms::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nmsparse: internal error: %s (please report this)\n", e.what());
    return nms::cli::kExitInternal;
  }
  return exit_code;
}
