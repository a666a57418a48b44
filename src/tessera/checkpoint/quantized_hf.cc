#include "tessera/checkpoint/quantized_hf.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_weight_files.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {
namespace fs = std::filesystem;
using quant::QuantFormat;
using quant::QuantizedMatrix;

namespace {

constexpr const char* kHead = "lm_head.weight";
constexpr const char* kBlockKeys = R"({"format", "group_size", "output_layer"})";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool per_row(QuantFormat f) { return f == QuantFormat::kFp6 || f == QuantFormat::kInt8; }

// The rows of `parts` one under the other: the fused matrix of q/k/v or gate/up.
QuantizedMatrix concat_rows(std::vector<QuantizedMatrix> parts) {
  TESSERA_CHECK(!parts.empty());
  QuantizedMatrix out = std::move(parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) {
    const QuantizedMatrix& p = parts[i];
    TESSERA_CHECK(p.format == out.format && p.cols == out.cols && p.group == out.group);
    out.rows += p.rows;
    out.codes.insert(out.codes.end(), p.codes.begin(), p.codes.end());
    out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
    out.mins.insert(out.mins.end(), p.mins.begin(), p.mins.end());
  }
  return out;
}

// The first `rows` rows of q (the real vocabulary rows of a padded output layer).
QuantizedMatrix first_rows(const QuantizedMatrix& q, int64_t rows) {
  QuantizedMatrix out = q;
  out.rows = rows;
  out.codes.resize(rows * quant::quant_row_bytes(q.format, q.cols));
  out.scales.resize(rows * q.groups_per_row());
  if (!out.mins.empty()) out.mins.resize(rows * q.groups_per_row());
  return out;
}

std::string block_json(const QuantSpec& spec) {
  return nlohmann::ordered_json{{"format", quant::quant_format_name(spec.format)},
                                {"group_size", spec.group_size()},
                                {"output_layer", spec.output_layer}}
      .dump();
}

}  // namespace

int64_t QuantSpec::group_size() const {
  if (per_row(format)) return -1;
  return format == QuantFormat::kQ4 ? q4_group : 32;
}

std::optional<QuantSpec> read_quant_spec(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, "Hugging Face config"));
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not valid JSON");
  }
  if (!j.is_object() || !j.contains("quantization") || j["quantization"].is_null())
    return std::nullopt;
  const nlohmann::json& q = j["quantization"];
  const auto fail = [&](const std::string& what) {
    throw Error(path + ": key 'quantization': " + what);
  };
  if (!q.is_object() || !q.contains("format") || !q["format"].is_string() ||
      !q.contains("group_size") || !q["group_size"].is_number_integer() ||
      !q.contains("output_layer") || !q["output_layer"].is_boolean())
    fail(std::string("expected an object ") + kBlockKeys +
         " (a format name, an integer, a boolean), got " + q.dump());
  QuantSpec spec;
  try {
    spec.format = quant::parse_quant_format(q["format"].get<std::string>());
  } catch (const Error& e) {
    fail(e.what());
  }
  spec.output_layer = q["output_layer"].get<bool>();
  const int64_t group = q["group_size"].get<int64_t>();
  if (spec.format == QuantFormat::kQ4 && (group == 32 || group == 64)) spec.q4_group = group;
  if (group != spec.group_size())
    fail("group_size " + std::to_string(group) + " does not suit " +
         q["format"].get<std::string>() + ": expected " +
         (spec.format == QuantFormat::kQ4 ? std::string("32 or 64")
                                          : std::to_string(spec.group_size())) +
         (per_row(spec.format) ? " (one scale per row)" : ""));
  return spec;
}

void write_quantized_hf(const model::ModelConfig& cfg,
                        const std::function<Tensor(const model::Parameter&)>& master,
                        const QuantSpec& spec, const std::string& out_dir,
                        int64_t max_shard_bytes) {
  check_hf_exportable(cfg);
  if (max_shard_bytes < 1)  // before the model is built and quantized
    throw Error(out_dir + ": the shard size must be >= 1 byte, got " +
                std::to_string(max_shard_bytes));
  // The model itself tells which weights quantize_weights quantizes and how bind() fuses them.
  model::GPTModel m(cfg, DType::kF32, std::nullopt, {});  // every value is written below
  for (model::Parameter& p : m.params().all()) {
    if (p.tied_copy) continue;
    const Tensor v = master(p);
    TESSERA_CHECK(v.dtype() == DType::kF32 && v.numel() == p.numel());
    p.value.view({p.numel()}).copy_from(v.view({p.numel()}));
  }
  std::map<std::string, QuantizedMatrix> stored;
  m.quantize_weights(
      [&](const std::vector<std::string>& names, const Tensor& weight) {
        const int64_t cols = weight.dim(1);
        std::vector<QuantizedMatrix> parts;
        int64_t row = 0;
        for (const std::string& name : names) {
          const int64_t rows = name == kHead ? weight.dim(0) : m.params().get(name).local_shape[0];
          try {
            parts.push_back(quant::quantize(weight.data<float>() + row * cols, rows, cols,
                                            spec.format, spec.q4_group));
          } catch (const Error& e) {
            throw Error(name + ": " + e.what());
          }
          stored[name] = name == kHead ? first_rows(parts.back(), cfg.vocab_size) : parts.back();
          row += rows;
        }
        TESSERA_CHECK(row == weight.dim(0));
        return concat_rows(std::move(parts));
      },
      spec.output_layer);

  // Declaration order, a quantized weight's codes, scales and minimums side by side (a tied
  // output layer's after all: it is no parameter of its own).
  std::vector<HfWeightEntry> entries;
  const std::function<Tensor(const model::Parameter&)> value = [](const model::Parameter& p) {
    return p.value;  // the whole parameter: the model is one process's
  };
  const auto add_quantized = [&](const std::string& name, const QuantizedMatrix& q) {
    const std::vector<int64_t> groups = {q.rows, q.groups_per_row()};
    const auto bytes = [](const void* data) {
      return [data](std::vector<Tensor>&) { return data; };
    };
    entries.push_back({name, SafeDType::kU8, {q.rows, quant::quant_row_bytes(q.format, q.cols)},
                       bytes(q.codes.data())});
    entries.push_back({name + ".scale", SafeDType::kF16, groups, bytes(q.scales.data())});
    if (spec.format == QuantFormat::kQ4)
      entries.push_back({name + ".min", SafeDType::kF16, groups, bytes(q.mins.data())});
  };
  for (const model::Parameter& p : m.params().all()) {
    if (p.tied_copy) continue;
    if (const auto q = stored.find(p.name); q != stored.end()) {
      add_quantized(p.name, q->second);
      continue;
    }
    entries.push_back(hf_f32_entry(cfg, p, value));
  }
  if (const auto head = stored.find(kHead); head != stored.end() && !m.params().contains(kHead))
    add_quantized(kHead, head->second);
  fs::create_directories(out_dir);
  write_hf_weight_files((fs::path(out_dir) / "model.safetensors").string(), entries,
                        max_shard_bytes,
                        {{"format", "pt"},
                         {"quantization", quant::quant_format_name(spec.format)},
                         {"quantization_group_size", std::to_string(spec.group_size())}});
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(hf_config_json(cfg));
  config["quantization"] = nlohmann::ordered_json::parse(block_json(spec));
  write_file_atomically((fs::path(out_dir) / "config.json").string(), config.dump(2) + "\n");
}

QuantizedWeights::QuantizedWeights(const std::string& dir, const model::ModelConfig& cfg,
                                   const QuantSpec& spec)
    : spec_(spec), files_(dir) {
  const char* format = quant::quant_format_name(spec.format);
  for (const SafetensorsFile* f : files_.files()) {
    const std::string& path = f->path();
    const auto& md = f->metadata();
    const auto stored = md.find("quantization");
    if (stored == md.end())
      throw Error(path + ": __metadata__ has no \"quantization\"; config.json says " + format);
    try {
      if (quant::parse_quant_format(stored->second) != spec.format)
        throw Error("\"" + stored->second + "\", config.json says " + format);
    } catch (const Error& e) {
      throw Error(path + ": __metadata__ \"quantization\": " + e.what());
    }
    const auto group = md.find("quantization_group_size");
    if (group == md.end() || group->second != std::to_string(spec.group_size()))
      throw Error(path + ": __metadata__ \"quantization_group_size\" is " +
                  (group == md.end() ? "missing" : "\"" + group->second + "\"") +
                  ", config.json's group_size is " + std::to_string(spec.group_size()));
  }
  const model::ParameterSet declared = model::GPTModel::declare_part(cfg, 1, 0, {});
  for (const model::Parameter& p : declared.all())
    if (p.global_shape.size() == 2)
      shapes_[p.name] = {p.shard.vocab_rows > 0 ? p.shard.vocab_rows : p.global_shape[0],
                         p.global_shape[1]};
  shapes_[kHead] = {cfg.vocab_size, cfg.hidden_size};

  for (const auto& [name, path] : files_.file_of()) {
    for (const char* tail : {".scale", ".min"}) {
      if (!name.ends_with(tail)) continue;
      const std::string base = name.substr(0, name.size() - std::strlen(tail));
      if (!files_.contains(base))
        throw Error(path + ": tensor '" + name + "' has no codes tensor '" + base + "'");
      names_.insert(base);
    }
    if (file(name).info(name).dtype == SafeDType::kU8) names_.insert(name);
  }
  for (const std::string& name : names_) {
    const std::string& path = file(name).path();
    const std::string where = path + ": tensor '" + name + "'";
    const SafeTensorInfo& info = file(name).info(name);
    if (info.dtype != SafeDType::kU8)
      throw Error(where + ": dtype " + safe_dtype_name(info.dtype) +
                  ", expected U8 codes (it has " + "a .scale; config.json's \"quantization\" is " +
                  format + ")");
    const auto shape = shapes_.find(name);
    if (shape == shapes_.end())
      throw Error(where + ": stored quantized, but it is not a weight of config.json's model");
    const auto [rows, cols] = shape->second;
    const std::string problem = quant::quant_shape_problem(
        spec.format, rows, cols, quant::quant_group(spec.format, cols, spec.q4_group));
    if (!problem.empty()) throw Error(where + ": " + problem);
    const int64_t row_bytes = quant::quant_row_bytes(spec.format, cols);
    if (info.shape.size() != 2 || info.shape[0] != rows || info.shape[1] != row_bytes)
      throw Error(where + " has shape " + shape_text(info.shape) + ", expected [" +
                  std::to_string(rows) + ", " + std::to_string(row_bytes) + "]: " + format +
                  " stores a row of " + std::to_string(cols) + " weights in " +
                  std::to_string(row_bytes) + " bytes");
    const int64_t g = quant::quant_group(spec.format, cols, spec.q4_group);
    for (const char* tail : {".scale", ".min"}) {
      const std::string side = name + tail;
      const bool wanted = std::string(tail) == ".scale" || spec.format == QuantFormat::kQ4;
      if (!wanted) {
        if (files_.contains(side))
          throw Error(file(side).path() + ": tensor '" + side +
                      "': only q4 stores minimums, this is " + format);
        continue;
      }
      if (!files_.contains(side))
        throw Error(files_.listing() + ": tensor '" + side + "' is missing: " + format +
                    " codes need it");
      const std::string& side_path = file(side).path();
      const SafeTensorInfo& s = file(side).info(side);
      if (s.dtype != SafeDType::kF16)
        throw Error(side_path + ": tensor '" + side + "': dtype " + safe_dtype_name(s.dtype) +
                    ", expected F16");
      if (s.shape != std::vector<int64_t>{rows, cols / g})
        throw Error(side_path + ": tensor '" + side + "' has shape " + shape_text(s.shape) +
                    ", expected " + shape_text({rows, cols / g}) + ": " + format +
                    " with group size " + std::to_string(spec.group_size()) + " over " +
                    std::to_string(cols) + " columns");
    }
  }
}

QuantizedMatrix QuantizedWeights::whole(const std::string& name) const {
  const SafeTensorInfo& info = file(name).info(name);
  QuantizedMatrix q;
  q.format = spec_.format;
  q.rows = info.shape[0];
  q.cols = shapes_.at(name).second;
  q.group = quant::quant_group(spec_.format, q.cols, spec_.q4_group);
  const auto* codes = static_cast<const uint8_t*>(file(name).data(name));
  q.codes.assign(codes, codes + info.numel);
  const auto read16 = [&](const std::string& side, std::vector<uint16_t>& out) {
    out.resize(file(side).info(side).numel);
    std::memcpy(out.data(), file(side).data(side), out.size() * sizeof(uint16_t));
  };
  read16(name + ".scale", q.scales);
  if (spec_.format == QuantFormat::kQ4) read16(name + ".min", q.mins);
  return q;
}

QuantizedMatrix QuantizedWeights::shard(const std::string& name, const model::Parameter& p) const {
  const QuantizedMatrix w = whole(name);
  const QuantFormat f = w.format;
  using Run = std::pair<int64_t, int64_t>;  // (first, length)
  std::vector<Run> rows, cols;
  for (const model::ShardPiece& piece : p.pieces)
    (p.shard.tp_dim == 0 ? rows : cols).push_back({piece.global_begin, piece.length});
  if (p.shard.tp_dim != 0 || rows.empty()) rows = {{0, p.global_shape[0]}};
  if (p.shard.tp_dim != 1 || cols.empty()) cols = {{0, w.cols}};
  const int64_t align = f == QuantFormat::kFp6 ? 4 : f == QuantFormat::kInt8 ? 1 : w.group;
  QuantizedMatrix out;
  out.format = f;
  out.cols = 0;
  for (const auto& [first, n] : cols) {
    // Worded alike on every rank (each reports it): the columns' count, not their place.
    if (first % align != 0 || n % align != 0)
      throw Error(file(name).path() + ": tensor '" + name + "': " + quant::quant_format_name(f) +
                  " cannot be split over these tensor-parallel ranks: a rank's " +
                  std::to_string(n) + " columns of a row are not whole " +
                  (f == QuantFormat::kFp6 ? "packs of 4" : "groups of " + std::to_string(align)) +
                  " (load it in one process, or quantize the unquantized weights on load)");
    out.cols += n;
  }
  out.group = per_row(f) ? out.cols : w.group;
  // Padded vocabulary rows hold zeros, so they carry the codes quantizing a zero row gives.
  const QuantizedMatrix zero =
      quant::quantize(std::vector<float>(w.cols, 0.0f).data(), 1, w.cols, f, spec_.q4_group);
  const int64_t row_bytes = quant::quant_row_bytes(f, w.cols), gpr = w.groups_per_row();
  for (const auto& [first, n] : rows) {
    for (int64_t r = first; r < first + n; ++r) {
      const bool pad = r >= w.rows;
      const QuantizedMatrix& src = pad ? zero : w;
      const int64_t sr = pad ? 0 : r;
      const uint8_t* codes = src.codes.data() + sr * row_bytes;
      for (const auto& [c, len] : cols) {
        const uint8_t* b = codes + quant::quant_row_bytes(f, c);
        out.codes.insert(out.codes.end(), b, b + quant::quant_row_bytes(f, len));
        if (per_row(f)) continue;
        const int64_t g0 = sr * gpr + c / w.group, gn = len / w.group;
        out.scales.insert(out.scales.end(), src.scales.begin() + g0, src.scales.begin() + g0 + gn);
        if (!src.mins.empty())
          out.mins.insert(out.mins.end(), src.mins.begin() + g0, src.mins.begin() + g0 + gn);
      }
      // fp6 and int8: the whole row's scale, whatever columns this rank holds.
      if (per_row(f)) out.scales.push_back(src.scales[sr]);
      ++out.rows;
    }
  }
  return out;
}

model::WeightQuantizer QuantizedWeights::quantizer(const model::ParameterSet& params) const {
  return [this, &params](const std::vector<std::string>& names, const Tensor&) {
    std::vector<QuantizedMatrix> parts;
    for (const std::string& name : names) {
      if (!names_.count(name))
        throw Error(files_.listing() + ": tensor '" + name +
                    "' is not stored quantized: config.json's " +
                    "\"quantization\" covers every attention, MLP and MoE expert weight" +
                    (name == kHead ? " and, with output_layer, lm_head.weight" : ""));
      // A tied output layer is split as the word embedding it is.
      std::string held = name;
      if (name == kHead && !params.contains(name))
        held = params.contains("model.embed_tokens.weight") ? "model.embed_tokens.weight"
                                                            : "transformer.wte.weight";
      parts.push_back(shard(name, params.get(held)));
      used_.insert(name);
    }
    return concat_rows(std::move(parts));
  };
}

void QuantizedWeights::check_all_used() const {
  for (const std::string& name : names_)
    if (!used_.count(name))
      throw Error(file(name).path() + ": tensor '" + name +
                  "' is stored quantized, but Tessera quantizes " +
                  "only attention, MLP and MoE expert weights" +
                  (spec_.output_layer ? " and the output layer" : " (output_layer is false)"));
}

}  // namespace tessera::checkpoint
