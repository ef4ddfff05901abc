#pragma once
/// @file bf16.hpp
/// bfloat16 storage and widening loads, shared by the kernels and the halo exchange.

#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace retexo {

/// bfloat16 storage type (round-to-nearest-even from float; arithmetic is done in float).
using bf16 = Eigen::bfloat16;

/// Accumulation type for a stored element type: bf16 accumulates in float, every other type
/// in itself.
template <typename In>
using accum_t = std::conditional_t<std::is_same_v<In, bf16>, float, In>;

/// v widened to its accumulation type.
template <typename In>
inline accum_t<In> load(const In& v) noexcept
{
    if constexpr (std::is_same_v<In, bf16>) {
        // bf16 -> float is a 16-bit shift; written out so loops over it vectorise.
        std::uint16_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &wide, sizeof f);
        return f;
    } else {
        return static_cast<accum_t<In>>(v);
    }
}

} // namespace retexo
