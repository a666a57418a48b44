#include "tessera/data/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tessera/core/error.h"

namespace tessera::data {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& source)
    : code_(std::make_unique<Code>()), pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(source + ": bad regular expression '" + pattern + "' at offset " +
                std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  thread_local struct Data {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    ~Data() { pcre2_match_data_free(md); }
  } data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, 0, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error("regular expression '" + pattern_ +
                  "' failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // An empty match: step over one character (or invalid byte) to make progress.
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80 &&
             next - b < 4)
        ++next;
      start = next;
    }
  }
  return out;
}

void Regex::replace_all(std::string& text, std::string_view content) const {
  const auto matches = find_all(text);
  if (matches.empty()) return;
  std::string out;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    out.append(text, last, b - last);
    out += content;
    last = e;
  }
  out.append(text, last, std::string::npos);
  text = std::move(out);
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace tessera::data
