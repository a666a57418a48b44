// resolve_argument_files (arguments.h): the files the flags name, read once after parsing.
#include <filesystem>

#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/megatron_format.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/train/arguments.h"

namespace tessera::train {

void resolve_argument_files(TrainArgs& args) {
  // --load of a Hugging Face directory: its config.json is the model unless --model names a
  // preset (given model flags apply on top either way; a mismatch fails at load, by tensor);
  // its tokenizer.json is the tokenizer unless one is given.
  const bool hf_load = !args.load.empty() && checkpoint::is_hf_directory(args.load);
  // A Megatron-LM checkpoint is refused here, before any work, naming the way through HF.
  if (!args.load.empty() && !hf_load) checkpoint::refuse_megatron_checkpoint(args.load);
  if (hf_load && args.model_preset.empty()) {
    model::ModelConfig hf = checkpoint::read_hf_config(args.load);
    copy_given_model_flags(args, hf);
    args.model = hf;
  }
  const std::string hf_tokenizer = args.load + "/tokenizer.json";
  if (hf_load && args.tokenizer_type.empty() && !args.mock_data &&
      std::filesystem::exists(hf_tokenizer)) {
    args.tokenizer_type = "HuggingFaceTokenizer";
    args.tokenizer_model = hf_tokenizer;
  }
  // The tokenizer determines the vocabulary unless --vocab-size says otherwise. It is loaded
  // here so that a bad vocabulary file fails before any work. Every way of naming a tokenizer
  // (its flags, --config, --load of a Hugging Face directory) has set tokenizer_type by now, so
  // this is the run's one load.
  if (args.tokenizer_type.empty()) return;
  const auto tokenizer = data::make_tokenizer(tokenizer_options(args));
  // (A Hugging Face model's vocabulary is its embedding's rows, whatever its tokenizer says.)
  // NullTokenizer and TikTokenizer take --vocab-size as their own parameter, and the model's
  // vocabulary is then the tokenizer's (NullTokenizer's V + 1, its EOD), as in Megatron.
  if ((!args.given(&model::ModelConfig::vocab_size) ||
       data::tokenizer_takes_vocab_size(args.tokenizer_type)) &&
      !hf_load)
    args.model.vocab_size = tokenizer->vocab_size();
  // A tokenizer without an EOD is not an error yet: the trainer's own load reports it where it
  // always has (after the runtime is up), so the id is simply left unrecorded.
  try {
    args.tokenizer_eod = tokenizer->eod();
  } catch (const Error&) {
    args.tokenizer_eod.reset();
  }
}

}  // namespace tessera::train
