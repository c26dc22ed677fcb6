// Subcommand registration. Each add_*_command adds one subcommand whose callback runs the command
// and stores its exit status in `exit_code`; errors are thrown as nms::Error and reported by main.
#pragma once

#include <CLI/CLI.hpp>

namespace nms::cli {

void add_info_command(CLI::App& app, int& exit_code);
void add_mask_command(CLI::App& app, int& exit_code);
void add_verify_command(CLI::App& app, int& exit_code);
void add_pack_command(CLI::App& app, int& exit_code);
void add_unpack_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);  // bench masks, bench kernels
// `bench kernels` under the `bench` command (cmd_bench_kernels.cpp).
void add_bench_kernels_subcommand(CLI::App& bench, int& exit_code);
void add_gradprune_command(CLI::App& app, int& exit_code);
// `train` (cmd_train.cpp, built with LibTorch); without LibTorch main.cpp registers a stand-in
// that says how to get it.
void add_train_command(CLI::App& app, int& exit_code);
// `calibrate` (cmd_calibrate.cpp, built with LibTorch and nmsparse_prune); otherwise main.cpp
// registers a stand-in that says what is missing.
void add_calibrate_command(CLI::App& app, int& exit_code);

}  // namespace nms::cli
