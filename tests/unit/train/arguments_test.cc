// tessera-train's flag table: typed "was given", presets under given model flags, the flag list,
// and parsing that reads no file but --config.
#include "tessera/train/arguments.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tessera/core/error.h"
#include "testing/parse_flags.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

TrainArgs parse(const std::vector<std::string>& flags) { return testing::parse_flags(flags); }

TEST(Arguments, GivenIsTrackedByFieldNotBySpelling) {
  const TrainArgs a =
      parse({"--zero-stage", "1", "--no-overlap-grad-reduce", "--hidden-size", "64"});
  EXPECT_TRUE(a.given(&TrainArgs::zero_stage));
  EXPECT_EQ(a.zero_stage, 1);
  // The negated spelling sets the same field, and counts as given.
  EXPECT_TRUE(a.given(&TrainArgs::overlap_grad_reduce));
  EXPECT_FALSE(a.overlap_grad_reduce);
  EXPECT_TRUE(a.given(&model::ModelConfig::hidden_size));
  EXPECT_FALSE(a.given(&model::ModelConfig::num_layers));
  EXPECT_FALSE(a.given(&TrainArgs::micro_batch_size));
  EXPECT_FALSE(a.given(&TrainArgs::use_distributed_optimizer));
  // A flag given with its default value is still given (a DeepSpeed config must not override it).
  EXPECT_TRUE(parse({"--micro-batch-size", "1"}).given(&TrainArgs::micro_batch_size));
  // Aliases are one field.
  EXPECT_TRUE(
      parse({"--deepspeed", "--deepspeed-config", "x.json"}).given(&TrainArgs::deepspeed_config));
}

TEST(Arguments, GivenSurvivesACopy) {
  const TrainArgs a = parse({"--log-interval", "7"});
  const TrainArgs copy = a;  // offsets are relative to the object, not addresses
  EXPECT_TRUE(copy.given(&TrainArgs::log_interval));
  EXPECT_FALSE(copy.given(&TrainArgs::eval_interval));
}

TEST(Arguments, ConfigFileKeysCountAsGiven) {
  testing::TempDir dir;
  const std::string path = dir.file("flags.json");
  std::ofstream(path) << R"({"zero-stage": 2, "swiglu": true, "seq-length": 32})";
  const TrainArgs a = parse({"--config", path});
  EXPECT_TRUE(a.given(&TrainArgs::zero_stage));
  EXPECT_EQ(a.zero_stage, 2);
  EXPECT_TRUE(a.given(&model::ModelConfig::swiglu));
  EXPECT_TRUE(a.model.swiglu);
  EXPECT_EQ(a.model.seq_length, 32);
}

TEST(Arguments, FlagNameFollowsTheTable) {
  EXPECT_EQ(flag_name(&TrainArgs::zero_stage), "--zero-stage");
  EXPECT_EQ(flag_name(&TrainArgs::ddp_bucket_size), "--ddp-bucket-size");
  EXPECT_EQ(flag_name(&TrainArgs::deepspeed_config), "--deepspeed_config");
  EXPECT_EQ(flag_name(&TrainArgs::overlap_grad_reduce), "--overlap-grad-reduce");
  // A field no flag sets.
  EXPECT_EQ(flag_name(&TrainArgs::tokenizer_eod), "(no flag)");
}

TEST(Arguments, PresetUnderGivenModelFlags) {
  const TrainArgs a = parse({"--model", "gpt2-124m", "--num-layers", "2", "--disable-bias-linear"});
  const model::ModelConfig preset = model::preset("gpt2-124m");
  EXPECT_EQ(a.model.num_layers, 2);                    // given
  EXPECT_FALSE(a.model.add_bias_linear);               // given, inverted flag
  EXPECT_EQ(a.model.hidden_size, preset.hidden_size);  // from the preset
  EXPECT_EQ(a.model.vocab_size, preset.vocab_size);
  // "--disable-bias-linear=false" keeps the biases; the preset's value is then overridden by it.
  EXPECT_TRUE(parse({"--model", "gpt2-124m", "--disable-bias-linear=false"}).model.add_bias_linear);
  // An enum flag over a preset.
  const TrainArgs b = parse({"--model", "llama-tiny", "--normalization", "LayerNorm"});
  EXPECT_EQ(b.model.normalization, model::Normalization::kLayerNorm);
  EXPECT_EQ(b.model.position_embedding, model::preset("llama-tiny").position_embedding);
}

TEST(Arguments, Llama3AndQwen2ModelFlags) {
  // Megatron's --use-rope-scaling: Llama 3.1's constants, --rope-scaling-factor's factor (8).
  const TrainArgs a = parse({"--model", "llama-tiny", "--use-rope-scaling"});
  EXPECT_EQ(a.model.rope_scaling, (kernels::RopeScaling{true, 8.0f, 1.0f, 4.0f, 8192}));
  EXPECT_FALSE(model::preset("llama-tiny").rope_scaling.llama3);
  const TrainArgs b =
      parse({"--model", "llama-tiny", "--use-rope-scaling", "--rope-scaling-factor", "32"});
  EXPECT_EQ(b.model.rope_scaling.factor, 32.0f);
  // --add-qkv-bias with --disable-bias-linear: Qwen2's biases.
  const TrainArgs c = parse({"--model", "llama-tiny", "--add-qkv-bias"});
  EXPECT_TRUE(c.model.add_qkv_bias);
  EXPECT_FALSE(c.model.add_bias_linear);  // the preset's
  EXPECT_TRUE(c.model.qkv_bias());
}

TEST(Arguments, EnumFlagsTakeNamesOnly) {
  const auto error_of = [](std::vector<std::string> flags) {
    std::vector<const char*> argv = {"tessera-train"};
    for (const auto& f : flags) argv.push_back(f.c_str());
    TrainArgs args;
    try {
      parse_arguments(static_cast<int>(argv.size()), argv.data(), args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad = error_of({"--normalization", "BatchNorm"});
  EXPECT_NE(bad.find("--normalization"), std::string::npos) << bad;
  EXPECT_NE(bad.find("LayerNorm"), std::string::npos) << bad;
  EXPECT_NE(bad.find("RMSNorm"), std::string::npos) << bad;
  // The enum's number is not a name.
  EXPECT_NE(error_of({"--normalization", "1"}), "no error");
  EXPECT_NE(error_of({"--position-embedding-type", "0"}), "no error");
}

TEST(Arguments, CopyGivenModelFlagsOntoAnotherBase) {
  // What resolve_argument_files does with a Hugging Face config.json.
  const TrainArgs a = parse({"--seq-length", "48", "--hidden-dropout", "0.25"});
  model::ModelConfig base = model::preset("llama-tiny");
  copy_given_model_flags(a, base);
  EXPECT_EQ(base.seq_length, 48);
  EXPECT_FLOAT_EQ(base.hidden_dropout, 0.25f);
  EXPECT_EQ(base.hidden_size, model::preset("llama-tiny").hidden_size);
}

TEST(Arguments, ParsingReadsNoFileButConfig) {
  // Files the flags name are read by resolve_argument_files, not while parsing.
  TrainArgs a =
      parse({"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "/nonexistent/encoder.json",
             "--merge-file", "/nonexistent/vocab.bpe", "--load", "/nonexistent/hf"});
  EXPECT_EQ(a.vocab_file, "/nonexistent/encoder.json");
  EXPECT_FALSE(a.tokenizer_eod.has_value());
  EXPECT_THROW(resolve_argument_files(a), Error);
}

TEST(Arguments, FlagListHasEveryFlagWithGroupAndDefault) {
  const std::string list = flag_list();
  EXPECT_NE(list.find("| optimizer | `--lr-decay-style` | `linear` |"), std::string::npos) << list;
  EXPECT_NE(list.find("| training | `--micro-batch-size` | `1` |"), std::string::npos);
  EXPECT_NE(list.find("| parallel | `--overlap-grad-reduce` (--no-overlap-grad-reduce) | `true` |"),
            std::string::npos);
  EXPECT_NE(list.find("| model | `--hidden-size` |"), std::string::npos);
  EXPECT_NE(list.find("| deepspeed | `--deepspeed_config` (--deepspeed-config) |"),
            std::string::npos);
  // One row per flag: as many rows as the help lists options (minus --help, --version,
  // --config and --list-flags, which are not fields).
  size_t rows = 0;
  for (size_t p = list.find("\n| "); p != std::string::npos; p = list.find("\n| ", p + 1)) ++rows;
  EXPECT_GT(rows, 100u);
}

}  // namespace
}  // namespace tessera::train
