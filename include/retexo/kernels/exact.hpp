#pragma once
/// @file exact.hpp
/// Order-independent ("exact") accumulation in 64-bit fixed point.
///
/// A sum over nodes computed on P ranks is grouped differently for every P, and float
/// addition is not associative, so ordinary sums drift with the partitioning.  Here every
/// contribution (a product of two floats, exact in double) is scaled by 2^k and truncated
/// to an int64 on its own; integer addition is associative, so the total is bit-identical
/// for any grouping, thread count or rank count.  k comes from a global bound B on the sum
/// of |contributions| (B * 2^k <= 2^62, so nothing overflows): the absolute resolution is
/// 2^-k, about 2^-45 of the largest contribution for 10^5 rows, far below float precision.

#include <retexo/kernels/common.hpp>

#include <cmath>
#include <cstdint>
#include <span>

namespace retexo::exact {

/// k such that bound * 2^k <= 2^62.  bound must be finite and >= 0.
inline int scale_exponent(double bound)
{
    RETEXO_ENSURE(std::isfinite(bound) && bound >= 0,
                  "retexo::exact::scale_exponent: bound " << bound << " is not a finite non-negative number");
    if (bound == 0) return 0;
    int e = 0;
    (void)std::frexp(bound, &e); // bound < 2^e
    return 62 - e;
}

/// One contribution in fixed point (truncation toward zero: deterministic, vectorisable).
inline std::int64_t fixed(double v, double scale) noexcept
{
    return static_cast<std::int64_t>(v * scale);
}

/// acc / 2^k as T.
template <typename T>
void to_real(const std::int64_t* acc, std::size_t n, int k, T* out)
{
    const double inv = std::ldexp(1.0, -k);
    for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(static_cast<double>(acc[i]) * inv);
}

/// acc (a x b, row-major) += X^T D, over rows n of X (ld a) and D (ld b), in fixed point.
void gemm_tn(const float* x, const float* d, std::int64_t n, int a, int b, int k, std::int64_t* acc);

/// acc (b) += column sums of D (n x b) in fixed point.
void colsum(const float* d, std::int64_t n, int b, int k, std::int64_t* acc);

/// acc (b) += column sums of X .* D (elementwise products, n x b) in fixed point.
void colsum_product(const float* x, const float* d, std::int64_t n, int b, int k, std::int64_t* acc);

/// Largest |value| of a float array (0 for an empty one).
float max_abs(const float* v, std::size_t n);

} // namespace retexo::exact
