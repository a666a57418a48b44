// The shared ending of a command-line tool's main(): parse the flags, run the tool, and turn
// every user error into one line on stderr with exit code 2 (tessera::Error's contract).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tessera {

// This process's rank before MPI is up, from the launcher's environment (Open MPI, PMI, Slurm);
// 0 when run without one. For printing a parse error once per job.
int launcher_rank();

// Parses argv with `app` (printing --help and returning 0 when asked), then returns `body()`.
// A CLI11 parse error or a tessera::Error prints "<tool>: ..." once and returns 2 (a parse error,
// which every rank of an mpirun job meets alike, is printed by launcher rank 0 only); any other
// exception prints "<tool>: internal error: ..." and returns 1.
int run_tool(CLI::App& app, int argc, const char* const* argv, const char* tool,
             const std::function<int()>& body);

}  // namespace tessera
