// Helpers shared by the Hugging Face import/export tests: editing safetensors files in memory
// and catching tessera::Error messages.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"

namespace tessera::checkpoint::testing_hf {

// A stored tensor with its bytes owned, to edit and write back.
struct Stored {
  std::string name;
  SafeDType dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

inline std::vector<Stored> load(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<Stored> out;
  for (const std::string& n : f.names()) {
    const SafeTensorInfo& info = f.info(n);
    const auto* b = static_cast<const unsigned char*>(f.data(n));
    out.push_back({n, info.dtype, info.shape, {b, b + (info.data_end - info.data_begin)}});
  }
  return out;
}

inline void save(const std::string& path, const std::vector<Stored>& tensors) {
  std::vector<SafeTensorView> views;
  for (const Stored& t : tensors) views.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  write_safetensors(path, views);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The message of the tessera::Error f throws; a test failure (and "") if it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no tessera::Error thrown";
  return "";
}

}  // namespace tessera::checkpoint::testing_hf
