#pragma once
/// @file hash.hpp
/// 64-bit FNV-1a over 32-bit words, fed byte by byte from the least significant: the same
/// value on every platform.  Identifies partition assignments, checkpointed inputs and initial
/// parameters.

#include <cstdint>
#include <cstring>
#include <span>

namespace retexo {

class fnv1a {
public:
    fnv1a() = default;
    /// Continue a hash whose value() so far was `state` (a hash fed in pieces, one per rank).
    explicit fnv1a(std::uint64_t state) noexcept : h_(state) {}
    void feed(std::uint32_t word) noexcept
    {
        for (int b = 0; b < 4; ++b) {
            h_ ^= (word >> (8 * b)) & 0xFFU;
            h_ *= 0x100000001b3ULL;
        }
    }
    /// Each value's bit pattern.
    void feed(std::span<const float> values) noexcept
    {
        for (float v : values) {
            std::uint32_t bits = 0;
            std::memcpy(&bits, &v, sizeof bits);
            feed(bits);
        }
    }
    std::uint64_t value() const noexcept { return h_; }

private:
    std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

} // namespace retexo
