#pragma once
/// @file common.hpp
/// Shared pieces of the compute kernels: element types (bf16 storage, from core/bf16.hpp),
/// optional NaN/Inf checks on inputs, and deterministic blocked reductions.

#include <retexo/core/bf16.hpp>
#include <retexo/core/error.hpp>
#include <retexo/core/parallel.hpp>
#include <retexo/core/types.hpp>

#include <Eigen/Core>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace retexo {

namespace detail {
/// exp(r) - 1 for r in [-ln2/2, ln2/2] (degree-6 polynomial), 2^n, and the n with
/// x = n ln2 + r (Cody-Waite range reduction), for x clamped to [-87, 88].
struct exp_parts {
    float em1;   // exp(r) - 1
    float scale; // 2^n
};
inline exp_parts exp_reduce(float x) noexcept
{
    const float xc = x < -87.0F ? -87.0F : (x > 88.0F ? 88.0F : x);
    const float n = std::nearbyint(xc * 1.44269504088896341F);
    float r = xc - n * 0.693359375F; // ln2 split in two for an exact first step
    r = r - n * -2.12194440e-4F;
    float p = 1.9875691500e-4F;
    p = p * r + 1.3981999507e-3F;
    p = p * r + 8.3334519073e-3F;
    p = p * r + 4.1665795894e-2F;
    p = p * r + 1.6666665459e-1F;
    p = p * r + 5.0000001201e-1F;
    const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return {p * r * r + r, scale};
}
} // namespace detail

/// exp(x) for float in a form compilers vectorise (Cody-Waite range reduction and a degree-6
/// polynomial; relative error below 2e-7 for x in [-87, 88]; inputs below -87 give 0).
/// Deterministic: the same input always gives the same bits.
inline float vexp(float x) noexcept
{
    const auto [em1, scale] = detail::exp_reduce(x);
    return x < -87.0F ? 0.0F : (em1 + 1.0F) * scale;
}
inline double vexp(double x) noexcept
{
    return std::exp(x);
}

/// exp(x) - 1 for float, vectorisable as vexp: 2^n (exp(r) - 1) + (2^n - 1), exact in its
/// first term for |x| < ln2/2 (n = 0), so accurate relative to the result near 0 as well.
inline float vexpm1(float x) noexcept
{
    const auto [em1, scale] = detail::exp_reduce(x);
    return x < -87.0F ? -1.0F : scale * em1 + (scale - 1.0F);
}
inline double vexpm1(double x) noexcept
{
    return std::expm1(x);
}

namespace detail {
inline std::atomic<bool>& numerics_flag()
{
    static std::atomic<bool> flag{false};
    return flag;
}
} // namespace detail

/// Turn NaN/Inf checking of kernel inputs on or off (process-wide; off by default).
inline void set_check_numerics(bool on) noexcept
{
    detail::numerics_flag().store(on);
}
inline bool check_numerics() noexcept
{
    return detail::numerics_flag().load(std::memory_order_relaxed);
}

/// With checking on, throw naming op and argument at the first non-finite value.
template <typename T>
void check_finite(const char* op, const char* what, const T* data, std::size_t n)
{
    if (!check_numerics()) return;
    for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(static_cast<double>(static_cast<float>(data[i]))))
            RETEXO_THROW("retexo::" << op << ": " << what << " holds a non-finite value ("
                                    << static_cast<double>(static_cast<float>(data[i])) << ") at element " << i);
}

/// Number of fixed reduction blocks for n rows: depends on n only, never on the thread
/// count, so blocked sums are bit-identical for any number of threads.
inline int reduction_blocks(std::int64_t n, std::int64_t min_rows_per_block = 2048)
{
    const std::int64_t b = n / min_rows_per_block;
    return static_cast<int>(b < 1 ? 1 : (b > 64 ? 64 : b));
}

/// Row range [begin, end) of block b of `blocks` over n rows.
inline std::pair<std::int64_t, std::int64_t> block_range(std::int64_t n, int blocks, int b)
{
    return {n * b / blocks, n * (b + 1) / blocks};
}

} // namespace retexo
