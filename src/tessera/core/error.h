// Errors. Two kinds, never mixed:
//  - tessera::Error: the user gave us something wrong (a flag, a config key, a file, sizes that
//    do not divide). The message names what was wrong, where, and what is expected, in one line.
//    Tools catch it in main(), print it once and exit with code 2 (kUserErrorExitCode).
//  - TESSERA_CHECK: an internal invariant. Failing it is a bug: print file:line and abort.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

inline constexpr int kUserErrorExitCode = 2;

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// `s` with line breaks turned into spaces and trailing spaces dropped: messages from libraries
// (CLI11, nlohmann::json) become the one line a user error is allowed.
std::string one_line(std::string s);

[[noreturn]] void check_failed(const char* condition, const char* file, int line,
                               const std::string& detail = "");

}  // namespace tessera

#define TESSERA_CHECK(cond)                                                     \
  do {                                                                          \
    if (!(cond)) ::tessera::check_failed(#cond, __FILE__, __LINE__);            \
  } while (0)

#define TESSERA_CHECK_MSG(cond, msg)                                            \
  do {                                                                          \
    if (!(cond)) ::tessera::check_failed(#cond, __FILE__, __LINE__, (msg));     \
  } while (0)
