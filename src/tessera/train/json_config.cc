#include "tessera/train/json_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tessera::train {
namespace {

std::string scalar_to_string(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    std::ostringstream os;
    os.precision(17);
    os << v.get<double>();
    return os.str();
  }
  throw CLI::ConversionError("--config: value '" + v.dump() + "' must be a string, number or boolean");
}

}  // namespace

std::string JsonConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  nlohmann::json j = nlohmann::json::object();
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    const std::string name = opt->get_lnames().front();
    if (opt->count() > 0) {
      const auto& results = opt->results();
      j[name] = results.size() == 1 ? nlohmann::json(results[0]) : nlohmann::json(results);
    } else if (default_also && !opt->get_default_str().empty()) {
      j[name] = opt->get_default_str();
    }
  }
  return j.dump(2);
}

std::vector<CLI::ConfigItem> JsonConfig::from_config(std::istream& input) const {
  nlohmann::json j;
  try {
    input >> j;
  } catch (const nlohmann::json::exception& e) {
    throw CLI::ConversionError(std::string("--config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw CLI::ConversionError("--config: the file must hold a JSON object");
  std::vector<CLI::ConfigItem> items;
  for (const auto& [key, value] : j.items()) {
    CLI::ConfigItem item;
    item.name = key;
    std::replace(item.name.begin(), item.name.end(), '_', '-');
    if (value.is_array()) {
      for (const auto& v : value) item.inputs.push_back(scalar_to_string(v));
    } else if (value.is_null()) {
      continue;
    } else {
      item.inputs.push_back(scalar_to_string(value));
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace tessera::train
