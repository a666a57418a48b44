#include "tessera/data/tokenizer/hf_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <vector>

#include "tessera/data/tokenizer/regex.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data::hf {
namespace {

// Applies `fn` to each maximal run of valid UTF-8, leaving invalid bytes in place.
template <class Fn>
void on_valid_runs(std::string& text, Fn fn) {
  std::string out;
  size_t i = 0, run = 0;
  auto flush = [&](size_t end) {
    if (end > run) out += fn(std::string_view(text).substr(run, end - run));
  };
  while (i < text.size()) {
    uint32_t cp;
    const size_t len = unicode::next_char(text, i, &cp);
    if (cp == unicode::kInvalid) {
      flush(i);
      out.push_back(text[i]);
      run = i + 1;
    }
    i += len;
  }
  flush(text.size());
  text = std::move(out);
}

class Unicode final : public Normalizer {
 public:
  Unicode(const std::string& type, const std::string& where) {
    UErrorCode status = U_ZERO_ERROR;
    if (type == "NFC") norm_ = icu::Normalizer2::getNFCInstance(status);
    if (type == "NFD") norm_ = icu::Normalizer2::getNFDInstance(status);
    if (type == "NFKC") norm_ = icu::Normalizer2::getNFKCInstance(status);
    if (type == "NFKD") norm_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status) || (norm_ == nullptr && type != "Lowercase"))
      throw Error(where + ": ICU has no " + type + " normalizer");
  }
  void apply(std::string& text) const override {
    on_valid_runs(text, [&](std::string_view run) {
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(run.data(), run.size()));
      if (norm_ == nullptr) {
        u.toLower(icu::Locale::getRoot());
      } else {
        UErrorCode status = U_ZERO_ERROR;
        u = norm_->normalize(u, status);
        if (U_FAILURE(status)) return std::string(run);
      }
      std::string s;
      u.toUTF8String(s);
      return s;
    });
  }

 private:
  const icu::Normalizer2* norm_ = nullptr;  // nullptr: Lowercase
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, p_);  // as Hugging Face: an empty text stays empty
  }

 private:
  std::string p_;
};

class Replace final : public Normalizer {
 public:
  Replace(const Json& j, const std::string& where)
      : re_(pattern_of(member(j, "pattern", where), where), where),
        content_(get_string(j, "content", where)) {}
  void apply(std::string& text) const override { re_.replace_all(text, content_); }

 private:
  Regex re_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& text) const override {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    size_t b = 0, e = text.size();
    if (left_)
      while (b < e && space(text[b])) ++b;
    if (right_)
      while (e > b && space(text[e - 1])) --e;
    text = text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::string& text) const override {
    for (const auto& p : parts_) p->apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::string pattern_of(const Json& obj, const std::string& where) {
  if (obj.is_object() && obj.contains("String"))
    return regex_escape(get_string(obj, "String", where));
  if (obj.is_object() && obj.contains("Regex")) return get_string(obj, "Regex", where);
  throw Error(where + ": a pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  const std::string at = where + ": normalizer " + type;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase")
    return std::make_unique<Unicode>(type, at);
  if (type == "Prepend") return std::make_unique<Prepend>(get_string(j, "prepend", at));
  if (type == "Replace") return std::make_unique<Replace>(j, at);
  if (type == "Strip")
    return std::make_unique<Strip>(opt_bool(j, "strip_left", at, true),
                                   opt_bool(j, "strip_right", at, true));
  if (type == "Sequence") {
    const Json& list = member(j, "normalizers", at);
    if (!list.is_array()) throw Error(at + ": 'normalizers' must be an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const Json& p : list)
      if (auto n = make_normalizer(p, where)) parts.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error(where + ": normalizer type '" + type +
              "' is not supported: expected NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, "
              "Strip or Sequence");
}

}  // namespace tessera::data::hf
