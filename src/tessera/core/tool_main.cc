#include "tessera/core/tool_main.h"

#include <cstdio>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera {

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

int run_tool(CLI::App& app, int argc, const char* const* argv, const char* tool,
             const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    if (launcher_rank() == 0)
      std::fprintf(stderr, "%s: %s (see --help)\n", tool, one_line(e.what()).c_str());
    return kUserErrorExitCode;
  } catch (const Error& e) {  // e.g. from a flag's callback such as --version
    std::fprintf(stderr, "%s: error: %s\n", tool, one_line(e.what()).c_str());
    return kUserErrorExitCode;
  }
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, one_line(e.what()).c_str());
    return kUserErrorExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, one_line(e.what()).c_str());
    return 1;
  }
}

}  // namespace tessera
