#include "tessera/train/flag_table.h"

namespace tessera::train {

const char* flag_group_name(FlagGroup group) {
  switch (group) {
    case FlagGroup::kModel:
      return "model";
    case FlagGroup::kTraining:
      return "training";
    case FlagGroup::kOptimizer:
      return "optimizer";
    case FlagGroup::kPrecision:
      return "precision";
    case FlagGroup::kData:
      return "data";
    case FlagGroup::kParallel:
      return "parallel";
    case FlagGroup::kCheckpoint:
      return "checkpoint";
    case FlagGroup::kLogging:
      return "logging";
    case FlagGroup::kDeepSpeed:
      return "deepspeed";
    case FlagGroup::kTestHooks:
      return "test hooks";
    case FlagGroup::kMegatronNoEffect:
      return "megatron, no effect";
    case FlagGroup::kMegatronRefused:
      return "megatron, refused";
  }
  return "?";
}

const char* flag_effect_name(FlagEffect effect) {
  switch (effect) {
    case FlagEffect::kImplemented:
      return "implemented";
    case FlagEffect::kNoEffect:
      return "no effect";
    case FlagEffect::kRefused:
      return "refused";
  }
  return "?";
}

CLI::Option* FlagTable::accepted(const std::string& name, int values, FlagEffect effect,
                                 const std::string& reason) {
  auto storage = std::make_shared<std::vector<std::string>>();
  accepted_storage_.push_back(storage);
  CLI::Option* option = nullptr;
  if (values == 0) {
    option = app_.add_flag(name);
  } else {
    option = app_.add_option(name, *storage, "");
    option->expected(1, values == 1 ? 1 : CLI::detail::expected_max_vector_size);
    if (values == 1) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  option->group(flag_group_name(group_));
  entries_.push_back({option, group_, -1, effect, reason});
  return option;
}

CLI::Option* FlagTable::declare(CLI::Option* option, const void* field) {
  option->group(flag_group_name(group_));
  // A flag given twice: the last wins, as with argparse (lists: parse_arguments drops the
  // earlier occurrences before CLI11 sees them).
  if (option->get_items_expected_max() <= 1)
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  entries_.push_back({option, group_, args_.offset_of(field), FlagEffect::kImplemented, {}});
  return option;
}

CLI::Option* FlagTable::model_flag_at(const std::string& name, const Accessor<bool>& field,
                                      bool value, const std::string& help) {
  // CLI11 writes the flag's own truth into `parsed`; the field gets `value` or its negation once
  // parsing is over (record_given), so "--disable-bias-linear=false" keeps the biases.
  auto parsed = std::make_shared<bool>(false);
  flag_storage_.push_back(parsed);
  CLI::Option* option = app_.add_flag(name, *parsed, help);
  // Shown as the flag's own default: a flag that sets `value` is off unless the field already is.
  bool& target = field(args_.model);
  option->default_str(target == value ? "true" : "false");
  deferred_.push_back([option, parsed, &target, value] {
    if (option->count() > 0) target = *parsed ? value : !value;
  });
  add_model_copy(field);
  return declare(option, &target);
}

void FlagTable::record_given() {
  for (const auto& assign : deferred_) assign();
  for (const Entry& e : entries_) {
    if (e.option->count() == 0) continue;
    if (e.offset >= 0)
      args_.given_fields.insert(e.offset);
    else
      args_.accepted_flags_given.push_back(
          {"--" + e.option->get_lnames().front(), e.effect, e.reason});
  }
}

std::vector<FlagInfo> FlagTable::rows() const {
  std::vector<FlagInfo> rows;
  for (const Entry& e : entries_) {
    FlagInfo row;
    const std::vector<std::string> names = e.option->get_lnames();
    row.name = "--" + names.front();
    for (size_t i = 1; i < names.size(); ++i) {
      if (!row.aliases.empty()) row.aliases += ' ';
      row.aliases.append("--").append(names[i]);
    }
    row.group = e.group;
    row.default_value = e.option->get_default_str();
    row.help = e.option->get_description();
    row.offset = e.offset;
    row.effect = e.effect;
    if (e.offset < 0) row.help = e.reason;
    const auto note = notes_.find(row.name);
    row.note = e.offset < 0 ? e.reason : note == notes_.end() ? "" : note->second;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tessera::train
