#pragma once
// Weighted sums of rows with the accumulators in registers: the inner loop of the sparse
// products and of the mean / GCN aggregation.

#include <retexo/core/types.hpp>

#include <cstring>

namespace retexo::detail {

/// One vector register of floats, the accumulators' type: 16 floats with AVX-512, 8 with AVX,
/// else 4.  A type wider than the registers is lowered to several, but GCC then keeps an
/// array of them on the stack, not in registers: on AVX2, 16-float accumulators made every
/// term a load and a store through the stack (the sparse products 3.3 GFLOP/s on the
/// non-zeros against 23 in registers, the aggregation 0.15 times the triad against 0.39).
#if defined(__AVX512F__)
using floats_v = float __attribute__((vector_size(64)));
#elif defined(__AVX__)
using floats_v = float __attribute__((vector_size(32)));
#else
using floats_v = float __attribute__((vector_size(16)));
#endif
inline constexpr int lanes = static_cast<int>(sizeof(floats_v) / sizeof(float));

// A vector passed or returned by value has an ABI that depends on the vector extensions
// (AVX, AVX-512), which GCC reports (-Wpsabi) in files built for other targets.  These are
// always inlined, even in builds that inline little else (sanitizers, -O0), so no call
// crosses a compiled boundary.  store_v takes its vector by reference all the same: where
// GCC compiles the helper's own body it notes the by-value parameter's ABI, past this
// pragma's reach.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
[[gnu::always_inline]] inline floats_v load_v(const float* p)
{
    floats_v v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

[[gnu::always_inline]] inline void store_v(float* p, const floats_v& v)
{
    std::memcpy(p, &v, sizeof v);
}

/// out[k, k + 16 * N) += sum over terms t in [t0, t1) of value(t) * row(t)[k, k + 16 * N), the
/// accumulators in registers; rows are read `ahead` terms ahead (prefetch, a 64-byte line per
/// 16 columns): they are gathered, which hardware prefetchers do not follow.
template <int N, typename Value, typename Row>
void add_block(offset_t t0, offset_t t1, const Value& value, const Row& row, int k, float* out)
{
    constexpr offset_t ahead = 4;
    constexpr int V = 16 * N / lanes; // accumulators
    floats_v a[V];
#pragma GCC unroll 16
    for (int j = 0; j < V; ++j)
        a[j] = load_v(out + k + lanes * j);
    for (offset_t t = t0; t < t1; ++t) {
        if (t + ahead < t1) {
            const char* p = reinterpret_cast<const char*>(row(t + ahead) + k);
#pragma GCC unroll 16
            for (int j = 0; j < N; ++j)
                __builtin_prefetch(p + 64 * j);
        }
        const float v = value(t);
        const float* r = row(t) + k;
#pragma GCC unroll 16
        for (int j = 0; j < V; ++j)
            a[j] += v * load_v(r + lanes * j);
    }
#pragma GCC unroll 16
    for (int j = 0; j < V; ++j)
        store_v(out + k + lanes * j, a[j]);
}

/// Columns held in registers at a time: 16 of AVX-512's 32 vector registers (256 columns),
/// else 8 of the 16 (64 with AVX, 32 without).
#ifdef __AVX512F__
inline constexpr int block_columns = 16 * lanes;
#else
inline constexpr int block_columns = 8 * lanes;
#endif

/// out[0, width) += sum over terms t in [t0, t1) of value(t) * row(t)[0, width), the terms in
/// order: every element gets the chain of fused multiply-adds of the plain loop
/// `for t: for k: out[k] += value(t) * row(t)[k]` (the same bits), but out is held in
/// registers up to block_columns columns at a time; the last width % 16 columns run the plain
/// loop.
template <typename Value, typename Row>
void add_terms(offset_t t0, offset_t t1, const Value& value, const Row& row, int width, float* out)
{
    int k = 0;
    for (; k + block_columns <= width; k += block_columns)
        add_block<block_columns / 16>(t0, t1, value, row, k, out);
    for (; k + 64 <= width; k += 64)
        add_block<4>(t0, t1, value, row, k, out);
    for (; k + 16 <= width; k += 16)
        add_block<1>(t0, t1, value, row, k, out);
    if (k == width) return;
    for (offset_t t = t0; t < t1; ++t) {
        const float v = value(t);
        const float* r = row(t);
#pragma omp simd
        for (int c = k; c < width; ++c)
            out[c] += v * r[c];
    }
}

} // namespace retexo::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
