// The table of tessera-train's flags. Each flag is declared once (arguments.cc), in the group of
// the concern it configures, bound to the TrainArgs field it sets, with its help text; the default
// is the field's initial value. The same declarations serve three readers:
//   - parsing (CLI11 writes the field; --config JSON keys are the flags without dashes);
//   - "was it given?": after parsing, TrainArgs::given(&TrainArgs::field) says whether a flag set
//     that field. Checks refer to the field, not to a flag's spelling, so renaming a flag cannot
//     silently disable a conflict check (as matching the literal "--zero-stage" could);
//   - the flag list (`tessera-train --list-flags`): every flag with its group, default and help,
//     from which a migration table can be generated.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/train/arguments.h"

namespace tessera::train {

enum class FlagGroup {
  kModel,             // architecture: sizes, norms, positions, dropout, initialisation
  kTraining,          // batches, length of training, evaluation
  kOptimizer,         // optimizer, learning-rate schedule, clipping
  kPrecision,         // bf16/fp16 and loss scaling
  kData,              // datasets, blends, splits, tokenizer
  kParallel,          // the process mesh, pipeline schedule, recomputation, DP/ZeRO, the runtime
  kCheckpoint,        // save, load, export
  kLogging,           // progress lines, timers, metrics and timeline files
  kDeepSpeed,         // a DeepSpeed JSON config in place of flags
  kTestHooks,         // fault injection for the test suite
  kMegatronNoEffect,  // Megatron flags accepted with no effect on this backend (logged)
  kMegatronRefused,   // Megatron flags refused with the missing feature named
};
const char* flag_group_name(FlagGroup group);

const char* flag_effect_name(FlagEffect effect);

// One row of the table: what `--list-flags` prints.
struct FlagInfo {
  std::string name;     // the long name, e.g. "--micro-batch-size"
  std::string aliases;  // other spellings, e.g. "--deepspeed-config", or "--no-..." forms
  FlagGroup group;
  std::string default_value;  // the field's initial value as text ("" for none)
  std::string help;
  std::ptrdiff_t offset = 0;  // of the field it sets within TrainArgs (-1: none)
  FlagEffect effect = FlagEffect::kImplemented;
  std::string note;  // no effect / refused: why; implemented: how it differs from Megatron
};

// Copies one model field from `src` to `dst`, for laying given model flags over another config.
struct ModelFieldCopy {
  std::ptrdiff_t offset;  // of the field within TrainArgs (args.model's member)
  std::function<void(model::ModelConfig& dst, const model::ModelConfig& src)> copy;
};

// Declares flags on a CLI11 app against one TrainArgs. Model flags are bound to args.model;
// parse_arguments lays the given ones over a preset afterwards (model_copies(),
// copy_given_model_flags in arguments.h).
class FlagTable {
 public:
  FlagTable(CLI::App& app, TrainArgs& args) : app_(app), args_(args) {}
  FlagTable(const FlagTable&) = delete;  // deferred assignments capture `this`
  FlagTable& operator=(const FlagTable&) = delete;

  // The flags declared from here on belong to `group`.
  void group(FlagGroup group) { group_ = group; }

  template <typename T>
  CLI::Option* option(const std::string& name, T TrainArgs::*field, const std::string& help = "") {
    return declare(app_.add_option(name, args_.*field, help), &(args_.*field));
  }
  // A boolean flag (`--bf16`, `--bf16=false`, `"bf16": true` in --config). `name` may carry a
  // negated form, e.g. "--overlap-grad-reduce,!--no-overlap-grad-reduce".
  CLI::Option* flag(const std::string& name, bool TrainArgs::*field, const std::string& help) {
    return declare(
        app_.add_flag(name, args_.*field, help)->default_str(args_.*field ? "true" : "false"),
        &(args_.*field));
  }

  template <typename T>
  CLI::Option* model_option(const std::string& name, T model::ModelConfig::*field,
                            const std::string& help) {
    return model_option_at(name, accessor(field), help);
  }
  // The same for a field of a nested struct of the config (cfg.moe.num_experts).
  template <typename S, typename T>
  CLI::Option* model_option(const std::string& name, S model::ModelConfig::*outer, T S::*inner,
                            const std::string& help) {
    return model_option_at(name, accessor(outer, inner), help);
  }
  // A boolean model flag that sets `field` to `value` when true and to !value when false (so
  // `--disable-bias-linear` clears add_bias_linear).
  CLI::Option* model_flag(const std::string& name, bool model::ModelConfig::*field, bool value,
                          const std::string& help) {
    return model_flag_at(name, accessor(field), value, help);
  }
  template <typename S>
  CLI::Option* model_flag(const std::string& name, S model::ModelConfig::*outer, bool S::*inner,
                          bool value, const std::string& help) {
    return model_flag_at(name, accessor(outer, inner), value, help);
  }
  // A model option naming one of `names`; anything else (a number included) is an error
  // listing them. Parsed as text and assigned once parsing is over (record_given).
  template <typename E>
  CLI::Option* model_enum(const std::string& name, E model::ModelConfig::*field,
                          const std::map<std::string, E>& names, const std::string& help) {
    return model_enum_at(name, accessor(field), names, help);
  }
  template <typename S, typename E>
  CLI::Option* model_enum(const std::string& name, S model::ModelConfig::*outer, E S::*inner,
                          const std::map<std::string, E>& names, const std::string& help) {
    return model_enum_at(name, accessor(outer, inner), names, help);
  }

  // A Megatron flag accepted without a TrainArgs field: `values` 0 for a switch, 1 for one value,
  // -1 for one or more. After parsing, a given one is listed in args.accepted_flags_given
  // (name, effect); apply_megatron_flags logs or refuses it with `reason`.
  CLI::Option* accepted(const std::string& name, int values, FlagEffect effect,
                        const std::string& reason);
  // How a declared flag differs from Megatron's (its default, its scope): the table's note.
  void note(const std::string& name, const std::string& text) { notes_[name] = text; }

  // After app.parse(): runs the deferred assignments of model_flag() and model_enum() and records
  // in args.given_fields every field a flag set.
  void record_given();
  std::vector<FlagInfo> rows() const;
  // One copy per model field a flag sets.
  const std::vector<ModelFieldCopy>& model_copies() const { return model_copies_; }

 private:
  // A model field as a function from a config to the field in it.
  template <typename T>
  using Accessor = std::function<T&(model::ModelConfig&)>;
  template <typename T>
  static Accessor<T> accessor(T model::ModelConfig::*field) {
    return [field](model::ModelConfig& c) -> T& { return c.*field; };
  }
  template <typename S, typename T>
  static Accessor<T> accessor(S model::ModelConfig::*outer, T S::*inner) {
    return [outer, inner](model::ModelConfig& c) -> T& { return (c.*outer).*inner; };
  }

  template <typename T>
  CLI::Option* model_option_at(const std::string& name, const Accessor<T>& field,
                               const std::string& help) {
    add_model_copy(field);
    T& target = field(args_.model);
    return declare(app_.add_option(name, target, help), &target);
  }
  CLI::Option* model_flag_at(const std::string& name, const Accessor<bool>& field, bool value,
                             const std::string& help);
  template <typename E>
  CLI::Option* model_enum_at(const std::string& name, const Accessor<E>& field,
                             const std::map<std::string, E>& names, const std::string& help) {
    auto parsed = std::make_shared<std::string>();
    text_storage_.push_back(parsed);
    std::vector<std::string> allowed;
    for (const auto& [text, value] : names) allowed.push_back(text);
    CLI::Option* option = app_.add_option(name, *parsed, help)->check(CLI::IsMember(allowed));
    E& target = field(args_.model);
    for (const auto& [text, value] : names)  // the default by its name, not its number
      if (value == target) option->default_str(text);
    deferred_.push_back([option, parsed, &target, names] {
      if (option->count() > 0) target = names.at(*parsed);
    });
    add_model_copy(field);
    return declare(option, &target);
  }

  CLI::Option* declare(CLI::Option* option, const void* field);
  template <typename T>
  void add_model_copy(const Accessor<T>& field) {
    model_copies_.push_back({args_.offset_of(&field(args_.model)),
                             [field](model::ModelConfig& dst, const model::ModelConfig& src) {
                               field(dst) = field(const_cast<model::ModelConfig&>(src));
                             }});
  }

  struct Entry {
    CLI::Option* option;
    FlagGroup group;
    std::ptrdiff_t offset;  // of the field within TrainArgs (-1: an accepted() flag)
    FlagEffect effect = FlagEffect::kImplemented;
    std::string reason;  // accepted(): why it has no effect or is refused
  };
  CLI::App& app_;
  TrainArgs& args_;
  FlagGroup group_ = FlagGroup::kModel;
  std::vector<Entry> entries_;
  std::vector<ModelFieldCopy> model_copies_;
  std::vector<std::function<void()>> deferred_;             // model_flag()'s assignments
  std::vector<std::shared_ptr<bool>> flag_storage_;         // what CLI11 writes model_flag()s into
  std::vector<std::shared_ptr<std::string>> text_storage_;  // and model_enum()s
  std::vector<std::shared_ptr<std::vector<std::string>>> accepted_storage_;  // accepted()'s values
  std::map<std::string, std::string> notes_;                                 // by flag name
};

}  // namespace tessera::train
