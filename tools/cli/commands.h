// Subcommand registration. Each add_*_command adds one subcommand whose callback runs the command
// and stores its exit status in `exit_code`; errors are thrown as nms::Error and reported by main.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace nms::cli {

void add_info_command(CLI::App& app, int& exit_code);
void add_mask_command(CLI::App& app, int& exit_code);
void add_verify_command(CLI::App& app, int& exit_code);
void add_pack_command(CLI::App& app, int& exit_code);
// `pack` as a call (cmd_pack.cpp), for `prune --packed`: the options of `nmsparse pack`.
struct PackRequest {
  CommonOptions common;
  std::string nm;
  std::string input;
  std::string output;
  std::string format = "nmsparse";
  std::string axis = "rows";
};
int run_pack_request(const PackRequest& request);
void add_unpack_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);  // bench masks, bench kernels
// `bench kernels` under the `bench` command (cmd_bench_kernels.cpp).
void add_bench_kernels_subcommand(CLI::App& bench, int& exit_code);
void add_gradprune_command(CLI::App& app, int& exit_code);
// `train` (cmd_train.cpp, built with LibTorch); without LibTorch main.cpp registers a stand-in
// that says how to get it.
void add_train_command(CLI::App& app, int& exit_code);
// `prune` (cmd_prune.cpp, built with nmsparse_prune, i.e. OpenBLAS); otherwise main.cpp registers
// a stand-in that says how to get it.
void add_prune_command(CLI::App& app, int& exit_code);
// `calibrate` (cmd_calibrate.cpp, built with LibTorch and nmsparse_prune); otherwise main.cpp
// registers a stand-in that says what is missing.
void add_calibrate_command(CLI::App& app, int& exit_code);

}  // namespace nms::cli
