// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF), the
// checksum of TFRecord files, and TFRecord's masked form of it. Check values (tests):
// crc32c("123456789") = 0xE3069283, masked 0xC78AB0E5.
//
// Debian 12 has no C/C++ CRC-32C library package (Google's crc32c is not in bookworm), and the
// records it guards are tens of bytes per training step, so a table-driven loop is all it needs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::tensorboard {

// CRC-32C of `n` bytes at `data` (n == 0: 0). Thread-safe.
uint32_t crc32c(const void* data, size_t n);

// TFRecord's mask, applied to a CRC stored next to the data it covers (so that a CRC of data
// that itself holds CRCs is not degenerate): rotate right by 15, add 0xA282EAD8.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

}  // namespace tessera::tensorboard
