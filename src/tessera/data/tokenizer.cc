#include "tessera/data/tokenizer.h"

#include "tessera/core/error.h"
#include "tessera/data/byte_tokenizer.h"

namespace tessera::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type) {
  if (type == "ByteLevel") return std::make_unique<ByteTokenizer>();
  throw Error("unknown tokenizer type '" + type + "': expected one of: ByteLevel");
}

}  // namespace tessera::data
