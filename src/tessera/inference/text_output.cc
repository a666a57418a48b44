#include "tessera/inference/text_output.h"

#include <algorithm>

namespace tessera::inference {

size_t complete_utf8(const std::string& text) {
  const size_t end = text.size();
  size_t back = 0;  // continuation bytes at the end
  while (back < 4 && back < end &&
         (static_cast<unsigned char>(text[end - 1 - back]) & 0xC0) == 0x80)
    ++back;
  if (back == end) return end;
  const unsigned char lead = static_cast<unsigned char>(text[end - 1 - back]);
  const size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return need > back ? end - 1 - back : end;
}

bool TextOutput::update(std::span<const int32_t> tokens) {
  if (stopped_) return true;
  text_ = tokenizer_->decode(tokens);
  size_t cut = std::string::npos;
  for (const std::string& s : stops_)
    if (!s.empty()) cut = std::min(cut, text_.find(s));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
  }
  taken_ = std::min(taken_, text_.size());
  return stopped_;
}

std::string TextOutput::take(bool final) {
  size_t upto = text_.size();
  if (!final && !stopped_) {
    upto = complete_utf8(text_);
    // An ending that is the start of a stop string waits until it is decided.
    for (const std::string& s : stops_) {
      if (s.empty()) continue;
      for (size_t k = std::min(s.size() - 1, upto); k >= 1; --k)
        if (text_.compare(upto - k, k, s, 0, k) == 0) {
          upto -= k;
          break;
        }
    }
  }
  if (upto <= taken_) return "";
  std::string out = text_.substr(taken_, upto - taken_);
  taken_ = upto;
  return out;
}

}  // namespace tessera::inference
