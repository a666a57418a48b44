#include "tessera/data/tokenizer/null_tokenizer.h"

#include <cstdint>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

NullTokenizer::NullTokenizer(int64_t vocab_size) : ids_(vocab_size) {
  if (vocab_size < 1 || vocab_size >= INT32_MAX)
    throw Error(
        "--tokenizer-type NullTokenizer needs --vocab-size V (the ids of the text are "
        "below V, V is the EOD): expected V in [1, 2^31 - 1), got " +
        std::to_string(vocab_size));
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t b = 0;
  while (b < text.size() && is_space(text[b])) ++b;
  if (b == text.size()) return ids;  // no ids (Megatron's int('') would fail)
  size_t pos = 0;
  for (int64_t field = 0;; ++field) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    std::string_view f = text.substr(pos, end - pos);
    while (!f.empty() && is_space(f.front())) f.remove_prefix(1);
    while (!f.empty() && is_space(f.back())) f.remove_suffix(1);
    const auto bad = [&](const std::string& why) {
      return Error("NullTokenizer: field " + std::to_string(field + 1) + " ('" +
                   std::string(f.substr(0, 40)) + "') " + why + ": expected ids in [0, " +
                   std::to_string(ids_) + ") separated by single spaces");
    };
    size_t i = 0;
    if (!f.empty() && f[0] == '-') throw bad("is negative");
    if (i < f.size() && f[i] == '+') ++i;
    if (i == f.size()) throw bad("is not an integer");
    int64_t v = 0;
    for (; i < f.size(); ++i) {
      if (f[i] < '0' || f[i] > '9') throw bad("is not an integer");
      v = v * 10 + (f[i] - '0');
      if (v >= ids_) throw bad("is too large");
    }
    ids.push_back(static_cast<int32_t>(v));
    if (end == text.size()) break;
    pos = end + 1;
  }
  return ids;
}

std::string NullTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > ids_)
      throw Error("NullTokenizer: cannot decode id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) + ": expected an id in [0, " + std::to_string(ids_ + 1) + ")");
    if (i > 0) out.push_back(' ');
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace tessera::data
