// SHA-256 (FIPS 180-4), used for cache keys and template hashes: a collision would load the wrong
// kernel, so a cryptographic hash is cheap insurance next to an NVRTC compile.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moejit {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view bytes);
  // Appends a length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
  Sha256& field(std::string_view bytes);
  std::string hex();  // finishes the hash; the object must not be updated afterwards

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace moejit
