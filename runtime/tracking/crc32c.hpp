// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing, and the
// "masked" form TFRecord stores so that a CRC of data holding CRCs stays well distributed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace accel::tracking {

// Continues `crc` (0 to start) over `data`: crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// TFRecord's mask: the CRC rotated right by 15 bits plus 0xa282ead8 (mod 2^32).
uint32_t masked_crc32c(std::string_view data);

}  // namespace accel::tracking
