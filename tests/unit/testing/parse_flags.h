// Test helper: tessera-train's parse_arguments on a list of flags (no program name), expecting
// it to return true (not --help, --version or a listing).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/train/arguments.h"

namespace tessera::testing {

inline train::TrainArgs parse_flags(const std::vector<std::string>& flags) {
  std::vector<const char*> argv = {"tessera-train"};
  for (const auto& f : flags) argv.push_back(f.c_str());
  train::TrainArgs args;
  EXPECT_TRUE(train::parse_arguments(static_cast<int>(argv.size()), argv.data(), args));
  return args;
}

}  // namespace tessera::testing
