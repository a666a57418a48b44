// Reading a whole (small) file: tokenizer vocabularies, tokenizer.json, cache descriptions.
#pragma once

#include <string>

namespace tessera {

// The file's bytes. Throws tessera::Error "cannot read <what> '<path>': <reason>" when the path
// is empty, a directory, missing or unreadable.
std::string read_file(const std::string& path, const std::string& what);

}  // namespace tessera
