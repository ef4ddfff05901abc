// Exact (fixed-point) sums and products: the same bits at any rank and thread count.
#include <retexo/kernels/exact.hpp>

#include <algorithm>

namespace retexo::exact {

void gemm_tn(const float* x, const float* d, std::int64_t n, int a, int b, int k, std::int64_t* acc)
{
    const double scale = std::ldexp(1.0, k);
    constexpr std::int64_t row_block = 64;
    // Threads own disjoint output rows; every element's integer sum is order-free.
#pragma omp parallel for schedule(static)
    for (int i = 0; i < a; ++i) {
        std::int64_t* out = acc + static_cast<std::ptrdiff_t>(i) * b;
        for (std::int64_t r0 = 0; r0 < n; r0 += row_block) {
            const std::int64_t r1 = std::min(n, r0 + row_block);
            for (std::int64_t r = r0; r < r1; ++r) {
                const float xi = x[r * a + i];
                if (xi == 0.0F) continue;
                const double xs = static_cast<double>(xi) * scale;
                const float* dr = d + r * b;
#pragma omp simd
                for (int j = 0; j < b; ++j)
                    out[j] += static_cast<std::int64_t>(xs * static_cast<double>(dr[j]));
            }
        }
    }
}

void colsum(const float* d, std::int64_t n, int b, int k, std::int64_t* acc)
{
    const double scale = std::ldexp(1.0, k);
    for (std::int64_t r = 0; r < n; ++r) {
        const float* dr = d + r * b;
#pragma omp simd
        for (int j = 0; j < b; ++j)
            acc[j] += static_cast<std::int64_t>(static_cast<double>(dr[j]) * scale);
    }
}

void colsum_product(const float* x, const float* d, std::int64_t n, int b, int k, std::int64_t* acc)
{
    const double scale = std::ldexp(1.0, k);
    for (std::int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * b;
        const float* dr = d + r * b;
#pragma omp simd
        for (int j = 0; j < b; ++j)
            acc[j] += static_cast<std::int64_t>(static_cast<double>(xr[j]) * scale * static_cast<double>(dr[j]));
    }
}

float max_abs(const float* v, std::size_t n)
{
    float m = 0.0F;
    for (std::size_t i = 0; i < n; ++i)
        m = std::max(m, std::fabs(v[i]));
    return m;
}

} // namespace retexo::exact
