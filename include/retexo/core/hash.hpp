#pragma once
/// @file hash.hpp
/// 64-bit FNV-1a over 32-bit words, fed byte by byte from the least significant: the same
/// value on every platform.  Identifies partition assignments, checkpointed inputs and initial
/// parameters.

#include <retexo/core/types.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

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

/// splitmix64's finaliser: a bijection of 64-bit words that mixes every bit into every other.
constexpr std::uint64_t splitmix64(std::uint64_t v) noexcept
{
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
    return v ^ (v >> 31);
}

/// FNV-1a 64-bit hash of (parts, num_nodes, assignment): identifies an assignment so that a
/// run, a checkpoint or a partition file made for another one is detected.
std::uint64_t assignment_hash(std::span<const part_t> assignment, part_t parts);
/// 16 lower-case hexadecimal digits, as files and messages show a hash.
std::string hash_to_hex(std::uint64_t h);
/// The inverse of hash_to_hex; throws unless `hex` is 16 such digits.
std::uint64_t hash_from_hex(const std::string& hex);

} // namespace retexo
