#include "tessera/data/byte_tokenizer.h"

#include "tessera/core/error.h"

namespace tessera::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (id == kEod) {
      text.append(kEodText);
    } else {
      throw Error("ByteLevel tokenizer: cannot decode id " + std::to_string(id) + " at position " +
                  std::to_string(i) + ": expected an id in [0, " + std::to_string(kVocabSize) +
                  ")");
    }
  }
  return text;
}

}  // namespace tessera::data
