#include "tessera/train/deepspeed_section.h"

#include <algorithm>

#include "tessera/train/deepspeed_keys.h"

namespace tessera::train::deepspeed {

Section::Section(const std::string& file, const std::string& path, const json& j)
    : file_(file), path_(path), j_(j) {
  if (!j.is_object()) fail(path_.empty() ? "the file" : path_, "must be a JSON object");
}

bool Section::has(const std::string& key) {
  known_.push_back(key);
  return contains(key);
}

bool Section::contains(const std::string& key) const {
  return j_.contains(key) && !j_.at(key).is_null();
}

double Section::number(const std::string& key, double fallback) {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_number()) fail(name(key), "must be a number, got " + v.dump());
  return v.get<double>();
}

int64_t Section::integer(const std::string& key, int64_t fallback) {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  // DeepSpeed configs often write sizes as 5e8: accept whole numbers in any notation.
  if (!v.is_number() || std::floor(v.get<double>()) != v.get<double>())
    fail(name(key), "must be a whole number, got " + v.dump());
  return static_cast<int64_t>(v.get<double>());
}

bool Section::boolean(const std::string& key, bool fallback) {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_boolean()) fail(name(key), "must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::string Section::string(const std::string& key, const std::string& fallback) {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_string()) fail(name(key), "must be a string, got " + v.dump());
  return v.get<std::string>();
}

Section Section::section(const std::string& key) {
  static const json kEmpty = json::object();
  return Section(file_, name(key), has(key) ? j_.at(key) : kEmpty);
}

const json& Section::raw(const std::string& key) {
  has(key);
  return j_.at(key);
}

void Section::only(std::initializer_list<const char*> allowed, const std::string& what) const {
  for (const auto& [key, value] : j_.items()) {
    if (value.is_null() ||
        std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }))
      continue;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail(name(key), "is not a parameter of " + what + " (it takes " + list + ")");
  }
}

void Section::check_read() const {
  for (const auto& [key, value] : j_.items()) {
    if (value.is_null()) continue;
    const DeepSpeedKey* row = find_deepspeed_key(name(key));
    if (row == nullptr || row->path != name(key) || row->kind != DeepSpeedKeyClass::kImplemented)
      continue;
    TESSERA_CHECK_MSG(std::find(known_.begin(), known_.end(), key) != known_.end(),
                      "the key table calls " + name(key) +
                          " implemented but the parser did not "
                          "read it");
  }
}

std::string Section::name(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void Section::fail(const std::string& key, const std::string& what) const {
  throw Error(file_ + ": " + key + " " + what);
}

}  // namespace tessera::train::deepspeed
