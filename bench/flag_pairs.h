// The benchmarks' flags are "--name value" pairs. A flag left without its value (a trailing one,
// or --help) is refused in one line with exit code 2: the pair loops skipped it, and the bench
// then ran for minutes with its defaults.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tessera::bench {

inline void require_flag_pairs(int argc, char** argv, const char* tool) {
  if (argc % 2 == 0) {  // argv[0], then pairs: an even count leaves the last flag alone
    std::fprintf(stderr, "%s: flag %s needs a value (flags are --name value pairs)\n", tool,
                 argv[argc - 1]);
    std::exit(2);
  }
}

}  // namespace tessera::bench
