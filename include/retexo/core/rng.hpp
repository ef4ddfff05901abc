#pragma once
/// @file rng.hpp
/// Counter-based random numbers: the value drawn for (seed, stream, counter) is a pure
/// function of those three integers, so results never depend on thread count or on the
/// order in which threads visit the work.  Used for synthetic graphs, dropout masks,
/// initialisation and shuffles.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>

namespace retexo {

/// splitmix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/// A stateless generator: a key derived from (seed, stream); draws are indexed by a counter.
class counter_rng {
public:
    constexpr counter_rng(std::uint64_t seed, std::uint64_t stream) noexcept
        : key_(mix64(mix64(seed) ^ (stream * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL)))
    {
    }

    /// 64 random bits for this counter.
    constexpr std::uint64_t bits(std::uint64_t counter) const noexcept { return mix64(key_ ^ mix64(counter)); }

    /// Uniform float in [0, 1) with 24 random bits.
    float uniform(std::uint64_t counter) const noexcept { return static_cast<float>(bits(counter) >> 40) * 0x1.0p-24F; }

    /// Uniform double in [0, 1) with 53 random bits.
    double uniform_double(std::uint64_t counter) const noexcept
    {
        return static_cast<double>(bits(counter) >> 11) * 0x1.0p-53;
    }

    /// Uniform integer in [0, n) (Lemire's multiply-shift; bias < n / 2^64).
    std::uint64_t below(std::uint64_t counter, std::uint64_t n) const noexcept
    {
        __extension__ using u128 = unsigned __int128; // GCC and Clang; quiet under -Wpedantic
        return static_cast<std::uint64_t>((static_cast<u128>(bits(counter)) * n) >> 64);
    }

    /// Standard normal deviate (Box-Muller on two derived uniforms).
    double normal(std::uint64_t counter) const noexcept
    {
        const double u1 = (static_cast<double>(bits(2 * counter) >> 11) + 0.5) * 0x1.0p-53;
        const double u2 = static_cast<double>(bits(2 * counter + 1) >> 11) * 0x1.0p-53;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

    std::uint64_t key() const noexcept { return key_; }

private:
    std::uint64_t key_;
};

/// Streams used by libretexo, so that independent uses of one seed never collide.
namespace rng_stream {
inline constexpr std::uint64_t generate_labels = 1;
inline constexpr std::uint64_t generate_weights = 2;
inline constexpr std::uint64_t generate_edges = 3;
inline constexpr std::uint64_t generate_features = 4;
inline constexpr std::uint64_t generate_means = 5;
inline constexpr std::uint64_t generate_split = 6;
inline constexpr std::uint64_t random_split = 7;
inline constexpr std::uint64_t partition_random = 10;
inline constexpr std::uint64_t init = 20;
inline constexpr std::uint64_t dropout = 21;
inline constexpr std::uint64_t shuffle = 22;
inline constexpr std::uint64_t sampling = 23;
inline constexpr std::uint64_t folds = 24;
} // namespace rng_stream

/// Fisher-Yates shuffle driven by a counter_rng (deterministic, platform-independent).
template <typename It>
void seeded_shuffle(It first, It last, const counter_rng& rng, std::uint64_t counter_base = 0)
{
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = n; i > 1; --i) {
        const auto j = rng.below(counter_base + i, i);
        using std::swap;
        swap(first[i - 1], first[j]);
    }
}

} // namespace retexo
