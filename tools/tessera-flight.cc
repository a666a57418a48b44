// tessera-flight: reads the flight-recorder dumps of a job the watchdog ended (or a rank that
// crashed) and says where it stopped: which rank did not reach which collective on which group
// while the others waited (comm/flight_report.h).
//
//   tessera-flight DIR                 every flight_recorder.rank<R>.json in DIR
//   tessera-flight FILE [FILE ...]     those dumps
//
// A missing directory, no dumps or a malformed dump: one line on stderr, exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/comm/flight_report.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"

namespace {

constexpr const char* kTool = "tessera-flight";

// The dump files named by `paths` (a directory stands for its flight_recorder.rank*.json).
std::vector<std::string> dump_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    if (!fs::exists(p)) throw tessera::Error(p + ": no such file or directory");
    if (!fs::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    size_t found = 0;
    for (const auto& entry : fs::directory_iterator(p)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("flight_recorder.rank", 0) == 0 && entry.path().extension() == ".json") {
        files.push_back(entry.path().string());
        ++found;
      }
    }
    if (found == 0)
      throw tessera::Error(p + ": no flight_recorder.rank<R>.json dumps in this directory");
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  CLI::App app{"Say where a hung or crashed job stopped, from its flight-recorder dumps."};
  app.set_version_flag("--version", tessera::kernels::version_line);
  app.add_option("dumps", paths, "a directory of dumps (--flight-recorder-dir) or dump files")
      ->required();
  return tessera::run_tool(app, argc, argv, kTool, [&] {
    std::vector<tessera::comm::FlightDump> dumps;
    for (const std::string& file : dump_files(paths)) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) throw tessera::Error(file + ": cannot read");
      dumps.push_back(tessera::comm::parse_flight_dump(text.str(), file));
    }
    std::fputs(tessera::comm::analyze_flight_dumps(std::move(dumps)).c_str(), stdout);
    return 0;
  });
}
