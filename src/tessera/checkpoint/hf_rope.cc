#include "tessera/checkpoint/hf_rope.h"

#include <charconv>
#include <climits>
#include <set>

#include "tessera/core/error.h"

namespace tessera::checkpoint {

double shortest_decimal(float f) {
  // to_chars/from_chars, unlike strtod, ignore the locale.
  char buf[64];
  const char* end = std::to_chars(buf, buf + sizeof(buf), f).ptr;
  double d = f;
  std::from_chars(buf, end, d);
  return d;
}

HfRope read_hf_rope(const nlohmann::json& value, const std::string& path, const char* key) {
  const auto fail = [&](const std::string& what) {
    throw Error(path + ": key '" + key + "': " + what);
  };
  HfRope rope;
  if (value.is_null()) return rope;
  if (!value.is_object()) fail("expected an object or null, got " + value.dump());
  const char* type_key = value.contains("rope_type") ? "rope_type" : "type";
  if (!value.contains(type_key) || !value[type_key].is_string())
    fail("expected a string \"rope_type\" in " + value.dump());
  const std::string type = value[type_key].get<std::string>();
  if (type != "default" && type != "llama3")
    fail("rope_type '" + type +
         "' is not supported: expected \"llama3\" (Llama 3.x) or \"default\" (plain RoPE), or "
         "null");
  if (value.contains("rope_theta")) {
    const nlohmann::json& theta = value["rope_theta"];
    if (!theta.is_number() || !(theta.get<double>() > 0))
      fail("rope_theta must be a positive number, got " + theta.dump());
    rope.theta = static_cast<float>(theta.get<double>());
  }
  std::set<std::string> known = {"rope_type", "type", "rope_theta"};
  if (type == "llama3") {
    kernels::RopeScaling& s = rope.scaling;
    s.llama3 = true;
    const auto number = [&](const char* name) {
      known.insert(name);
      if (!value.contains(name) || !value[name].is_number())
        fail("rope_type llama3 needs the number '" + std::string(name) + "', got " +
             (value.contains(name) ? value[name].dump() : std::string("none")));
      return value[name].get<double>();
    };
    s.factor = static_cast<float>(number("factor"));
    s.low_freq_factor = static_cast<float>(number("low_freq_factor"));
    s.high_freq_factor = static_cast<float>(number("high_freq_factor"));
    const double original = number("original_max_position_embeddings");
    if (!value["original_max_position_embeddings"].is_number_integer() || original < 1 ||
        original > INT_MAX)
      fail("original_max_position_embeddings must be an integer >= 1, got " +
           value["original_max_position_embeddings"].dump());
    s.original_max_position_embeddings = static_cast<int>(original);
    if (!(s.factor > 0)) fail("factor must be > 0, got " + value["factor"].dump());
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor))
      fail("expected 0 < low_freq_factor < high_freq_factor, got " +
           value["low_freq_factor"].dump() + " and " + value["high_freq_factor"].dump());
  }
  // A key Tessera does not know may change the frequencies (attention_factor, ...): refused.
  for (const auto& [name, v] : value.items())
    if (!known.count(name))
      fail("key '" + name + "' of rope_type " + type +
           " is not supported (Tessera computes factor, low_freq_factor, high_freq_factor and "
           "original_max_position_embeddings only)");
  return rope;
}

nlohmann::ordered_json hf_rope_scaling_json(const kernels::RopeScaling& s) {
  nlohmann::ordered_json j;
  j["factor"] = shortest_decimal(s.factor);
  j["low_freq_factor"] = shortest_decimal(s.low_freq_factor);
  j["high_freq_factor"] = shortest_decimal(s.high_freq_factor);
  j["original_max_position_embeddings"] = s.original_max_position_embeddings;
  j["rope_type"] = "llama3";
  return j;
}

}  // namespace tessera::checkpoint
