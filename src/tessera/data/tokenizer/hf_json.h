// Typed field access for tokenizer.json: each helper throws tessera::Error naming the file
// (`where`), the field and the expected type, so a malformed file is one clear line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"

namespace tessera::data::hf {

using Json = nlohmann::json;

inline const Json& member(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) throw Error(where + ": expected a JSON object holding '" + key + "'");
  const auto it = obj.find(key);
  if (it == obj.end()) throw Error(where + ": '" + key + "' is missing");
  return *it;
}

inline std::string get_string(const Json& obj, const char* key, const std::string& where) {
  const Json& v = member(obj, key, where);
  if (!v.is_string())
    throw Error(where + ": '" + key + "' holds " + v.type_name() + ": expected a string");
  return v.get<std::string>();
}

// A string field that may be missing or null (then `fallback`).
inline std::string opt_string(const Json& obj, const char* key, const std::string& where,
                              const std::string& fallback = "") {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return get_string(obj, key, where);
}

inline bool opt_bool(const Json& obj, const char* key, const std::string& where, bool fallback) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  const Json& v = obj[key];
  if (!v.is_boolean())
    throw Error(where + ": '" + key + "' holds " + v.type_name() + ": expected true or false");
  return v.get<bool>();
}

inline int64_t opt_int(const Json& obj, const char* key, const std::string& where,
                       int64_t fallback) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  const Json& v = obj[key];
  if (!v.is_number_integer())
    throw Error(where + ": '" + key + "' holds " + v.type_name() + ": expected an integer");
  return v.get<int64_t>();
}

// "type" of a component object.
inline std::string type_of(const Json& obj, const std::string& where) {
  return get_string(obj, "type", where);
}

// {"String": s} or {"Regex": r} of Split and Replace: the regex pattern (a string is escaped).
std::string pattern_of(const Json& obj, const std::string& where);

}  // namespace tessera::data::hf
