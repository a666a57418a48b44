#include "tessera/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tessera {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void check_failed(const char* condition, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "internal error: %s:%d: check failed: %s%s%s\n", file, line, condition,
               detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tessera
