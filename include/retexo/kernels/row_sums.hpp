#pragma once
// Weighted sums of rows with the accumulators in registers: the inner loop of the sparse
// products and of the mean / GCN aggregation.

#include <retexo/core/types.hpp>

#include <cstring>

namespace retexo::detail {

/// 16 floats, for accumulators the compiler keeps in registers (any target: GCC and Clang
/// lower the type to whatever vectors it has).
using floats16 = float __attribute__((vector_size(64)));

// A 64-byte vector passed or returned by value has an ABI that depends on AVX-512, which GCC
// reports (-Wpsabi) in every file of a consumer built without -march=native, and on a machine
// without AVX-512 in every file that instantiates the loops below.  These are always
// inlined, even in builds that inline little else (sanitizers, -O0), so no call crosses a
// compiled boundary.  store16 takes its vector by reference all the same: where GCC compiles
// the helper's own body it notes the by-value parameter's ABI, past this pragma's reach.
// (Both by reference, the aggregation once ran 8-13% slower; store16 alone by reference
// runs as fast, perf/bench_kernels.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
[[gnu::always_inline]] inline floats16 load16(const float* p)
{
    floats16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

[[gnu::always_inline]] inline void store16(float* p, const floats16& v)
{
    std::memcpy(p, &v, sizeof v);
}

/// out[k, k + 16 * N) += sum over terms t in [t0, t1) of value(t) * row(t)[k, k + 16 * N), the
/// N accumulators in registers; rows are read `ahead` terms ahead (prefetch): they are gathered,
/// which hardware prefetchers do not follow.
template <int N, typename Value, typename Row>
void add_block(offset_t t0, offset_t t1, const Value& value, const Row& row, int k, float* out)
{
    constexpr offset_t ahead = 4;
    floats16 a[N];
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j)
        a[j] = load16(out + k + 16 * j);
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
        for (int j = 0; j < N; ++j)
            a[j] += v * load16(r + 16 * j);
    }
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j)
        store16(out + k + 16 * j, a[j]);
}

/// Columns held in registers at a time: 256 with AVX-512's 32 vector registers, else 64.
#ifdef __AVX512F__
inline constexpr int block_columns = 256;
#else
inline constexpr int block_columns = 64;
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
