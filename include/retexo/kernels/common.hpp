#pragma once
/// @file common.hpp
/// Shared pieces of the compute kernels: element types (bf16 storage), optional NaN/Inf
/// checks on inputs, and deterministic blocked reductions.

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <Eigen/Core>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace retexo {

/// bfloat16 storage type (round-to-nearest-even from float; arithmetic is done in float).
using bf16 = Eigen::bfloat16;

/// Accumulation type for a stored element type: bf16 and float accumulate in float.
template <typename In>
using accum_t = std::conditional_t<std::is_same_v<In, double>, double, float>;

template <typename In>
inline accum_t<In> load(const In& v) noexcept
{
    return static_cast<accum_t<In>>(v);
}

namespace detail {
inline std::atomic<bool>& numerics_flag()
{
    static std::atomic<bool> flag{false};
    return flag;
}
}  // namespace detail

/// Turn NaN/Inf checking of kernel inputs on or off (process-wide; off by default).
inline void set_check_numerics(bool on) noexcept { detail::numerics_flag().store(on); }
inline bool check_numerics() noexcept { return detail::numerics_flag().load(std::memory_order_relaxed); }

/// With checking on, throw naming op and argument at the first non-finite value.
template <typename T>
void check_finite(const char* op, const char* what, const T* data, std::size_t n)
{
    if (!check_numerics()) return;
    for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(static_cast<double>(static_cast<float>(data[i]))))
            RETEXO_THROW("retexo::" << op << ": " << what << " holds a non-finite value ("
                                    << static_cast<double>(static_cast<float>(data[i]))
                                    << ") at element " << i);
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

}  // namespace retexo
