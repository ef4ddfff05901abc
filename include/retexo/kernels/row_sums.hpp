#pragma once
// Weighted sums of rows with the accumulators in registers: the inner loop of the sparse
// products and of the mean / GCN aggregation.

#include <retexo/core/bf16.hpp>
#include <retexo/core/types.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

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

/// A register's worth of bf16 values, as their 16 bits.
using halves_v = std::uint16_t __attribute__((vector_size(sizeof(floats_v) / 2)));

/// bf16 bits widened to the floats they are (exact: a 16-bit shift), as retexo::load widens
/// one value.
[[gnu::always_inline]] inline floats_v widen(halves_v h)
{
    using words_v = std::uint32_t __attribute__((vector_size(sizeof(floats_v))));
    const words_v w = __builtin_convertvector(h, words_v) << 16;
    floats_v v;
    std::memcpy(&v, &w, sizeof v);
    return v;
}

[[gnu::always_inline]] inline floats_v load_v(const bf16* p)
{
    halves_v h;
    std::memcpy(&h, p, sizeof h);
    return widen(h);
}

[[gnu::always_inline]] inline void store_v(float* p, const floats_v& v)
{
    std::memcpy(p, &v, sizeof v);
}

/// A pass's last columns (fewer than 16) in registers, the lanes past them masked off, where
/// the CPU has masked loads, which read none of the masked-out columns (AVX-512; AVX2 for
/// float rows): then each term costs one multiply-add a register for them, not one a column.
/// Elsewhere, and for bf16 rows without AVX-512BW, add_block's scalar loop.
#if defined(__AVX512F__)
#define RETEXO_MASKED_TAIL 1
using lane_mask = __mmask16;

/// The lanes below n (n < 16).
[[gnu::always_inline]] inline lane_mask first_lanes(int n)
{
    return static_cast<lane_mask>((1U << n) - 1U);
}

[[gnu::always_inline]] inline floats_v load_first(const float* p, lane_mask m)
{
    return _mm512_maskz_loadu_ps(m, p);
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
[[gnu::always_inline]] inline floats_v load_first(const bf16* p, lane_mask m)
{
    return widen(reinterpret_cast<halves_v>(_mm256_maskz_loadu_epi16(m, p)));
}
#endif

[[gnu::always_inline]] inline void store_first(float* p, lane_mask m, const floats_v& v)
{
    _mm512_mask_storeu_ps(p, m, v);
}
#elif defined(__AVX2__)
#define RETEXO_MASKED_TAIL 1
using lane_mask = __m256i;

/// The lanes below n (any n: none below 1, all from 8).
[[gnu::always_inline]] inline lane_mask first_lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

[[gnu::always_inline]] inline floats_v load_first(const float* p, lane_mask m)
{
    return _mm256_maskload_ps(p, m);
}

[[gnu::always_inline]] inline void store_first(float* p, lane_mask m, const floats_v& v)
{
    _mm256_maskstore_ps(p, m, v);
}
#endif

/// Whether rows of T take the masked registers for a pass's last columns.
template <typename T>
inline constexpr bool masked_tail =
#if defined(RETEXO_MASKED_TAIL)
    std::is_same_v<T, float>
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    || std::is_same_v<T, bf16>
#endif
#else
    false
#endif
    ;

/// out[k, k + 16 * N + tail) += sum over terms t in [t0, t1) of value(t) * row(t)[same columns],
/// in one pass over the terms: 16 * N columns in vector registers, the last `tail` (< 16) in
/// masked registers (masked_tail) or scalars.  Rows of float or bf16 (widened to float).
/// Rows are read `ahead` terms ahead (prefetch, every 64-byte line the columns span): they
/// are gathered, which hardware prefetchers do not follow.  One pass matters: a gathered row
/// costs a memory latency per pass, so a width of 47 in three passes (16, 16, then 15 in a
/// plain loop) took 1.5 times as long as 64 in one.
template <int N, typename Value, typename Row>
void add_block(offset_t t0, offset_t t1, const Value& value, const Row& row, int k, int tail, float* out)
{
    constexpr offset_t ahead = 4;
    constexpr int V = 16 * N / lanes; // accumulators
    floats_v a[V > 0 ? V : 1];
    float rest[16];
    float* const o = out + k;
    float* const o_tail = o + 16 * N;
#pragma GCC unroll 16
    for (int j = 0; j < V; ++j)
        a[j] = load_v(o + lanes * j);
    using element = std::remove_cvref_t<decltype(*row(t0))>;
#if defined(RETEXO_MASKED_TAIL)
    constexpr int R = 16 / lanes; // registers of a tail
    lane_mask m[R];
    floats_v rest_v[R]{};
    if constexpr (masked_tail<element>) {
        for (int i = 0; i < R; ++i) {
            m[i] = first_lanes(tail - lanes * i);
            rest_v[i] = load_first(o_tail + lanes * i, m[i]); // masked-out lanes: no access
        }
    } else
#endif
        for (int c = 0; c < tail; ++c)
            rest[c] = o_tail[c];
    constexpr int lines = N > 0 ? (16 * N * static_cast<int>(sizeof(element)) + 63) / 64 : 1; // from the first
    const int last = static_cast<int>(sizeof(element)) * (16 * N + tail) - 1;                 // the columns' last byte
    for (offset_t t = t0; t < t1; ++t) {
        if (t + ahead < t1) {
            const char* p = reinterpret_cast<const char*>(row(t + ahead) + k);
#pragma GCC unroll 16
            for (int j = 0; j < lines; ++j)
                __builtin_prefetch(p + 64 * j);
            if ((reinterpret_cast<std::uintptr_t>(p) & 63) + last >= 64 * lines)
                __builtin_prefetch(p + last); // the line an unaligned row or the tail ends in
        }
        const float v = value(t);
        const element* r = row(t) + k;
#pragma GCC unroll 16
        for (int j = 0; j < V; ++j)
            a[j] += v * load_v(r + lanes * j);
        const element* r_tail = r + 16 * N;
#if defined(RETEXO_MASKED_TAIL)
        if constexpr (masked_tail<element>) {
#pragma GCC unroll 2
            for (int i = 0; i < R; ++i)
                if (tail > lanes * i) rest_v[i] += v * load_first(r_tail + lanes * i, m[i]);
        } else
#endif
        {
#pragma omp simd
            for (int c = 0; c < tail; ++c)
                rest[c] += v * load(r_tail[c]);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < V; ++j)
        store_v(o + lanes * j, a[j]);
#if defined(RETEXO_MASKED_TAIL)
    if constexpr (masked_tail<element>) {
        for (int i = 0; i < R; ++i)
            store_first(o_tail + lanes * i, m[i], rest_v[i]);
    } else
#endif
        for (int c = 0; c < tail; ++c)
            o_tail[c] = rest[c];
}

/// Columns held in registers at a time: 16 of AVX-512's 32 vector registers (256 columns),
/// else 8 of the 16 (64 with AVX, 32 without).
#ifdef __AVX512F__
inline constexpr int block_columns = 16 * lanes;
#else
inline constexpr int block_columns = 8 * lanes;
#endif

/// Columns a pass of add_terms holds in registers for rows gathered from memory (the
/// aggregations): 64, four 64-byte lines of a float row (32 without AVX).  There, passes of
/// 64 beat one pass over all the columns the registers would hold (AVX-512: 256): a GCN
/// aggregation of 256 columns (1M nodes, in-degree 20, 2 threads) took 1050-1250 ms in passes
/// of 64 against 1300-1480 ms in one pass, of 128 columns 575-615 against 740-760.  Rows
/// that stay in cache (the sparse products' weight rows) take block_columns.
inline constexpr int gather_columns = block_columns < 64 ? block_columns : 64;

/// add_block<N> for the `groups` (< Limit) full 16-column groups at k and the `tail` columns
/// after them: N found at run time among the instantiations.
template <int Limit, int N = 0, typename Value, typename Row>
void add_rest(int groups, offset_t t0, offset_t t1, const Value& value, const Row& row, int k, int tail, float* out)
{
    if constexpr (N < Limit) {
        if (groups == N) return add_block<N>(t0, t1, value, row, k, tail, out);
        add_rest<Limit, N + 1>(groups, t0, t1, value, row, k, tail, out);
    }
}

/// out[0, width) += sum over terms t in [t0, t1) of value(t) * row(t)[0, width), the terms in
/// order: every element gets the chain of multiply-adds of the plain loop
/// `for t: for k: out[k] += value(t) * row(t)[k]` (the same bits), but out is held in
/// registers Pass columns at a time, and the columns after the last full pass in one more.
template <int Pass = block_columns, typename Value, typename Row>
void add_terms(offset_t t0, offset_t t1, const Value& value, const Row& row, int width, float* out)
{
    static_assert(Pass % 16 == 0 && Pass <= block_columns, "add_terms: a pass is whole 16-column groups in registers");
    int k = 0;
    for (; k + Pass <= width; k += Pass)
        add_block<Pass / 16>(t0, t1, value, row, k, 0, out);
    if (k < width) add_rest<Pass / 16>((width - k) / 16, t0, t1, value, row, k, (width - k) % 16, out);
}

} // namespace retexo::detail

#undef RETEXO_MASKED_TAIL

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
