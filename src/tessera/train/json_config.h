// Reads `--config FILE.json` for CLI11: a JSON object whose keys are flag names without the
// leading dashes ("num-layers" or "num_layers"). Scalars become one value, arrays several,
// booleans set or clear flags. Explicit command-line flags win over the file (CLI11 applies
// config values only to options not given on the command line).
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::train {

class JsonConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace tessera::train
