#include "tessera/data/tokenizer/hf_decoder.h"

#include "tessera/data/tokenizer/gpt2_tokenizer.h"
#include "tessera/data/tokenizer/regex.h"

namespace tessera::data::hf {
namespace {

class ByteLevel final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      append_byte_level(out, t);
      t = std::move(out);
    }
  }
};

class ByteFallback final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      const int b = byte_fallback_value(t);
      if (b >= 0) t = std::string(1, static_cast<char>(b));
    }
  }
};

class Fuse final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Replace final : public Decoder {
 public:
  Replace(const Json& j, const std::string& where)
      : re_(pattern_of(member(j, "pattern", where), where), where),
        content_(get_string(j, "content", where)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) re_.replace_all(t, content_);
  }

 private:
  Regex re_;
  std::string content_;
};

class Strip final : public Decoder {
 public:
  Strip(std::string content, int64_t start, int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (auto& t : tokens) {
      for (int64_t k = 0; k < start_ && t.starts_with(content_); ++k) t.erase(0, content_.size());
      for (int64_t k = 0; k < stop_ && t.ends_with(content_); ++k)
        t.erase(t.size() - content_.size());
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      const std::string& t = tokens[k];
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, replacement_.size(), replacement_) == 0) {
          if (!(k == 0 && i == 0 && strip_first_)) out.push_back(' ');
          i += replacement_.size();
        } else {
          out.push_back(t[i++]);
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

int byte_fallback_value(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  const std::string at = where + ": decoder " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Replace") return std::make_unique<Replace>(j, at);
  if (type == "Strip")
    return std::make_unique<Strip>(get_string(j, "content", at), opt_int(j, "start", at, 0),
                                   opt_int(j, "stop", at, 0));
  if (type == "Metaspace") {
    std::string scheme = opt_string(j, "prepend_scheme", at, "");
    if (scheme.empty()) scheme = opt_bool(j, "add_prefix_space", at, true) ? "always" : "never";
    const std::string rep = opt_string(j, "replacement", at, "\xE2\x96\x81");
    if (rep.empty()) throw Error(at + ": 'replacement' is empty: expected one character");
    return std::make_unique<Metaspace>(rep, scheme != "never");
  }
  if (type == "Sequence") {
    const Json& list = member(j, "decoders", at);
    if (!list.is_array()) throw Error(at + ": 'decoders' must be an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const Json& p : list)
      if (auto n = make_decoder(p, where)) parts.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error(where + ": decoder type '" + type +
              "' is not supported: expected ByteLevel, ByteFallback, Fuse, Replace, Strip, "
              "Metaspace or Sequence");
}

}  // namespace tessera::data::hf
