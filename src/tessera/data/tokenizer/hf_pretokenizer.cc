#include "tessera/data/tokenizer/hf_pretokenizer.h"

#include <algorithm>

#include "tessera/data/tokenizer/gpt2_split.h"
#include "tessera/data/tokenizer/regex.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data::hf {
namespace {

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  throw Error(where + ": behavior '" + s +
              "' is unknown: expected Isolated, Removed, MergedWithPrevious, MergedWithNext or "
              "Contiguous");
}

// Splits `piece` around the matches of `re` the way Hugging Face's split() does.
void split_piece(const std::string& piece, const Regex& re, Behavior behavior, bool invert,
                 std::vector<std::string>& out) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  size_t last = 0;
  for (const auto& [b, e] : re.find_all(piece)) {
    if (b > last) segs.push_back({last, b, invert});
    segs.push_back({b, e, !invert});
    last = e;
  }
  if (last < piece.size()) segs.push_back({last, piece.size(), invert});
  std::vector<Seg> merged;
  bool previous = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Seg& s : segs) merged.push_back(s);
      break;
    case Behavior::kRemoved:
      for (const Seg& s : segs)
        if (!s.match) merged.push_back(s);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Seg& s : segs) {
        if (s.match && !previous && !merged.empty())
          merged.back().e = s.e;
        else
          merged.push_back(s);
        previous = s.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& s = segs[k];
        if (s.match && !previous && !merged.empty())
          merged.back().b = s.b;
        else
          merged.push_back(s);
        previous = s.match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case Behavior::kContiguous:
      for (const Seg& s : segs) {
        if (s.match == previous && !merged.empty())
          merged.back().e = s.e;
        else
          merged.push_back(s);
        previous = s.match;
      }
      break;
  }
  for (const Seg& s : merged)
    if (s.e > s.b) out.push_back(piece.substr(s.b, s.e - s.b));
}

class Split final : public PreTokenizer {
 public:
  Split(const std::string& pattern, Behavior behavior, bool invert, const std::string& where)
      : re_(pattern, where), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const auto& p : pieces) split_piece(p, re_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Regex re_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    std::vector<std::string_view> views;
    for (auto& p : pieces) {
      if (add_prefix_space_ && !p.starts_with(' ')) p.insert(0, 1, ' ');
      views.clear();
      if (use_regex_)
        gpt2_split(p, views);
      else
        views.push_back(p);
      for (const auto v : views) out.push_back(unicode::to_byte_level(v));
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, std::string scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {}
  void apply(std::vector<std::string>& pieces, bool first_segment) const override {
    std::vector<std::string> out;
    for (size_t k = 0; k < pieces.size(); ++k) {
      std::string s;
      for (char c : pieces[k]) {
        if (c == ' ')
          s += replacement_;
        else
          s.push_back(c);
      }
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && first_segment && k == 0);
      if (prepend && !s.starts_with(replacement_)) s.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(s));
        continue;
      }
      size_t start = 0;  // each replacement begins a new piece (MergedWithNext)
      for (size_t at = s.find(replacement_, 1); at != std::string::npos;
           at = s.find(replacement_, at + 1)) {
        out.push_back(s.substr(start, at - start));
        start = at;
      }
      if (start < s.size()) out.push_back(s.substr(start));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_, scheme_;
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>& pieces, bool first_segment) const override {
    for (const auto& p : parts_) p->apply(pieces, first_segment);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where);
  const std::string at = where + ": pre_tokenizer " + type;
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(opt_bool(j, "add_prefix_space", at, true),
                                       opt_bool(j, "use_regex", at, true));
  if (type == "Split")
    return std::make_unique<Split>(pattern_of(member(j, "pattern", at), at),
                                   parse_behavior(get_string(j, "behavior", at), at),
                                   opt_bool(j, "invert", at, false), at);
  if (type == "Metaspace") {
    std::string scheme = opt_string(j, "prepend_scheme", at, "");
    if (scheme.empty()) scheme = opt_bool(j, "add_prefix_space", at, true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      throw Error(at + ": prepend_scheme '" + scheme +
                  "' is unknown: expected always, first or never");
    const std::string rep = opt_string(j, "replacement", at, "\xE2\x96\x81");
    if (rep.empty()) throw Error(at + ": 'replacement' is empty: expected one character");
    return std::make_unique<Metaspace>(rep, scheme, opt_bool(j, "split", at, true));
  }
  if (type == "Digits")  // ASCII digits only, as Hugging Face's is_ascii_digit()
    return std::make_unique<Split>(opt_bool(j, "individual_digits", at, false) ? "[0-9]" : "[0-9]+",
                                   Behavior::kIsolated, false, at);
  if (type == "Whitespace")
    return std::make_unique<Split>("\\w+|[^\\w\\s]+", Behavior::kRemoved, true, at);
  if (type == "WhitespaceSplit")
    return std::make_unique<Split>("\\s+", Behavior::kRemoved, false, at);
  if (type == "Punctuation")
    return std::make_unique<Split>("[\\p{P}!-/:-@\\[-`{-~]",
                                   parse_behavior(opt_string(j, "behavior", at, "Isolated"), at),
                                   false, at);
  if (type == "Sequence") {
    const Json& list = member(j, "pretokenizers", at);
    if (!list.is_array()) throw Error(at + ": 'pretokenizers' must be an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const Json& p : list)
      if (auto n = make_pre_tokenizer(p, where)) parts.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error(where + ": pre_tokenizer type '" + type +
              "' is not supported: expected ByteLevel, Split, Metaspace, Digits, Whitespace, "
              "WhitespaceSplit, Punctuation or Sequence");
}

}  // namespace tessera::data::hf
