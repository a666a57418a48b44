// Internal to the DeepSpeed config parser (deepspeed_config.cc, deepspeed_optimizer.cc): typed
// access to one block of the file, and the rule that a file's value gives way to nothing but
// agreement with an explicit flag.
#pragma once

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/train/arguments.h"

namespace tessera::train::deepspeed {

using json = nlohmann::json;

inline std::string number_str(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// One block of the file: typed access to its keys (a null value counts as absent, as DeepSpeed
// reads it), remembering which keys were read. Every key has been classified against the key
// table before (deepspeed_keys.h), so check_read() only asserts that each key the table calls
// implemented was read by the parser: the table and the parser cannot drift apart unnoticed.
// Errors are tessera::Error naming the file and the key path.
class Section {
 public:
  Section(const std::string& file, const std::string& path, const json& j);

  bool has(const std::string& key);  // present and not null; marks the key read
  bool contains(const std::string& key) const;
  double number(const std::string& key, double fallback);
  int64_t integer(const std::string& key, int64_t fallback);  // 5e8 is a whole number
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  Section section(const std::string& key);  // an absent block reads as empty
  const json& raw(const std::string& key);
  // Refuses keys outside `allowed` ("KEY is not a parameter of WHAT (it takes: ...)"), as the
  // Python constructor DeepSpeed passes them to would.
  void only(std::initializer_list<const char*> allowed, const std::string& what) const;
  // Asserts every present key whose table row is "implemented" was read (an internal check).
  void check_read() const;
  std::string name(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& file() const { return file_; }

 private:
  std::string file_, path_;
  const json& j_;
  std::vector<std::string> known_;
};

// Sets args.*field from the file (or DeepSpeed's default when the file has no such key) unless a
// flag set the field; a key the file does set must then agree with the flag.
template <typename T>
void set_unless_given(TrainArgs& args, T TrainArgs::*field, std::type_identity_t<T> value,
                      const std::string& file, const std::string& key, bool in_file = true) {
  T& target = args.*field;
  if (args.given(field)) {
    if (in_file && target != value)
      throw Error(file + ": " + key + " " + number_str(static_cast<double>(value)) +
                  " contradicts " + flag_name(field) + " " +
                  number_str(static_cast<double>(target)));
    return;
  }
  target = value;
}

// The "optimizer" and "scheduler" blocks (deepspeed_optimizer.cc). `autos` are the paths whose
// "auto" was resolved from flags (deepspeed_auto.h): such a flag does not contradict the file.
// Warnings (one line each) go to `warnings`.
void apply_optimizer(Section& top, TrainArgs& args);
void apply_scheduler(Section& top, TrainArgs& args, const std::set<std::string>& autos,
                     std::vector<std::string>& warnings);

// zero_optimization's offload_optimizer, offload_param and sub_group_size, and the top-level
// "aio" block (deepspeed_offload.cc).
void apply_offload(Section& zero, Section& top, TrainArgs& args);

}  // namespace tessera::train::deepspeed
