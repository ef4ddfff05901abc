#pragma once
/// @file dense.hpp
/// Row-wise dense blocks with forward and backward passes: LayerNorm, ReLU, LeakyReLU,
/// ELU, dropout (counter-based masks keyed by global row id, so a mask never depends on the
/// thread count or on how rows are split across ranks) and bias / column reductions.
/// Reductions over rows use fixed blocks: results are independent of the thread count.

#include <retexo/core/names.hpp>
#include <retexo/core/rng.hpp>
#include <retexo/kernels/common.hpp>

#include <bit>
#include <span>
#include <string>
#include <type_traits>

namespace retexo {

enum class activation { none, relu, leaky_relu, elu };
constexpr name_table<activation, 4> names_of(activation)
{
    return {"activation",
            {{{activation::none, "none"},
              {activation::relu, "relu"},
              {activation::leaky_relu, "leaky_relu"},
              {activation::elu, "elu"}}}};
}

/// y = act(x) elementwise (in place allowed).
template <typename T>
void activation_forward(activation a, const T* x, std::size_t n, T* y, double param = 0.01);
/// dx = dy * act'(x) given the forward input x (dx may alias dy).
template <typename T>
void activation_backward(activation a, const T* x, const T* dy, std::size_t n, T* dx, double param = 0.01);

/// LayerNorm over each row of width w: y = (x - mean) / sqrt(var + eps) * gamma + beta.
/// Saves the per-row mean and inverse std (n entries each) for the backward pass.
template <typename T>
void layer_norm_forward(const T* x, std::int64_t n, int w, const T* gamma, const T* beta, double eps, T* y, T* mean,
                        T* rstd);
/// dx (n x w); d_gamma, d_beta (w) overwritten with sums over the rows (fixed blocks).
template <typename T>
void layer_norm_backward(const T* x, const T* dy, std::int64_t n, int w, const T* gamma, const T* mean, const T* rstd,
                         T* dx, T* d_gamma, T* d_beta);
/// Normalised x-hat of the forward pass (for exact-mode parameter gradients).
template <typename T>
void layer_norm_xhat(const T* x, std::int64_t n, int w, const T* mean, const T* rstd, T* xhat);
/// dx only (parameter gradients computed elsewhere, e.g. in exact mode).
template <typename T>
void layer_norm_backward_data(const T* x, const T* dy, std::int64_t n, int w, const T* gamma, const T* mean,
                              const T* rstd, T* dx);

/// Dropout mask key: (seed, layer, step) -> a counter_rng stream.  Element (row id g, column
/// f) is kept iff the 16-bit lane f % 4 of bits(g * ceil(w / 4) + f / 4) is >= p * 2^16: one
/// 64-bit draw serves four elements.  Kept values are scaled by 1 / (1 - p).
struct dropout_key {
    std::uint64_t seed = 0;
    std::uint64_t layer = 0;
    std::uint64_t step = 0;
    counter_rng rng() const noexcept
    {
        return counter_rng(seed, rng_stream::dropout * 0x9E3779B97F4A7C15ULL + layer * 1000003ULL +
                                     step * 0x632BE59BD9B4E019ULL);
    }
};
/// A kept value: x * scale if lane (a 16-bit mask lane) >= threshold, else +0.  Branch-free
/// (the keep decisions are coin flips), so that the loops over it vectorise.
template <typename T>
inline T dropout_value(T x, T scale, std::uint64_t lane, std::uint64_t threshold) noexcept
{
    using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>; // T's bits
    const U keep = lane >= threshold ? ~U{0} : U{0};
    return std::bit_cast<T>(std::bit_cast<U>(x * scale) & keep);
}
/// The dropout masks of dropout_forward: columns [col0, col0 + w) of rows mask_width wide
/// (0: w), p > 0.
template <typename T>
class dropout_mask {
public:
    dropout_mask(double p, const dropout_key& key, std::int64_t col0, int w, std::int64_t mask_width);
    /// yr (w) = the row xr of the node with global id `id`, masked and scaled; yr may be xr.
    void row(const T* xr, node_t id, T* yr) const;

private:
    counter_rng rng_;
    std::uint64_t threshold_;
    T scale_;
    std::uint64_t groups_;
    std::int64_t col0_;
    int w_;
};
/// y = dropout(x) for rows with global ids row_ids[i]; p = 0 copies.  x may be columns
/// [col0, col0 + w) of rows mask_width wide, masked as those rows are (mask_width 0: w).
template <typename T>
void dropout_forward(const T* x, std::span<const node_t> row_ids, int w, double p, const dropout_key& key, T* y,
                     std::int64_t col0 = 0, std::int64_t mask_width = 0);
/// dx = dy * mask / (1 - p) (mask recomputed from the key).
template <typename T>
void dropout_backward(const T* dy, std::span<const node_t> row_ids, int w, double p, const dropout_key& key, T* dx);

/// out (w) = sum of the n rows of x (n x w), in fixed row blocks.
template <typename T>
void column_sums(const T* x, std::int64_t n, int w, T* out);

/// Gather rows: out[i] = x[rows[i]] (width w).
template <typename T>
void gather_rows(const T* x, std::span<const node_t> rows, int w, T* out);
/// Scatter-add rows: x[rows[i]] += in[i] (rows distinct).
template <typename T>
void scatter_add_rows(const T* in, std::span<const node_t> rows, int w, T* x);

} // namespace retexo

#include <retexo/kernels/dense_impl.hpp>
