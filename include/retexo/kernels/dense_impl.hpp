#pragma once
// Template bodies of dense.hpp, which includes this file at its end: include dense.hpp, not this.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace retexo {

template <typename T>
void activation_forward(activation a, const T* x, std::size_t n, T* y, double param)
{
    const T s = static_cast<T>(param);
    switch (a) {
    case activation::none:
        if (x != y) std::copy(x, x + n, y);
        break;
    case activation::relu: // NOLINT(bugprone-branch-clone): not a clone, the check skips OpenMP loop bodies
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n)))
        for (std::size_t i = 0; i < n; ++i)
            y[i] = x[i] > T(0) ? x[i] : T(0);
        break;
    case activation::leaky_relu:
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n)))
        for (std::size_t i = 0; i < n; ++i)
            y[i] = x[i] > T(0) ? x[i] : s * x[i];
        break;
    case activation::elu:
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n) * 8))
        for (std::size_t i = 0; i < n; ++i)
            y[i] = x[i] > T(0) ? x[i] : s * vexpm1(x[i]);
        break;
    }
}

template <typename T>
void activation_backward(activation a, const T* x, const T* dy, std::size_t n, T* dx, double param)
{
    const T s = static_cast<T>(param);
    switch (a) {
    case activation::none:
        if (dx != dy) std::copy(dy, dy + n, dx);
        break;
    case activation::relu: // NOLINT(bugprone-branch-clone): not a clone, the check skips OpenMP loop bodies
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n)))
        for (std::size_t i = 0; i < n; ++i)
            dx[i] = x[i] > T(0) ? dy[i] : T(0);
        break;
    case activation::leaky_relu:
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n)))
        for (std::size_t i = 0; i < n; ++i)
            dx[i] = x[i] > T(0) ? dy[i] : s * dy[i];
        break;
    case activation::elu:
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(static_cast <std::int64_t>(n) * 8))
        for (std::size_t i = 0; i < n; ++i)
            dx[i] = x[i] > T(0) ? dy[i] : dy[i] * s * vexp(x[i]);
        break;
    }
}

template <typename T>
void layer_norm_forward(const T* x, std::int64_t n, int w, const T* gamma, const T* beta, double eps, T* y, T* mean,
                        T* rstd)
{
    check_finite("layer_norm::forward", "x", x, static_cast<std::size_t>(n) * w);
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t r = 0; r < n; ++r) {
        const T* xr = x + r * w;
        double m = 0;
#pragma omp simd reduction(+ : m)
        for (int j = 0; j < w; ++j)
            m += xr[j];
        m /= w;
        double v = 0;
#pragma omp simd reduction(+ : v)
        for (int j = 0; j < w; ++j)
            v += (xr[j] - m) * (xr[j] - m);
        v /= w;
        const double rs = 1.0 / std::sqrt(v + eps);
        mean[r] = static_cast<T>(m);
        rstd[r] = static_cast<T>(rs);
        T* yr = y + r * w;
        for (int j = 0; j < w; ++j)
            yr[j] = static_cast<T>((xr[j] - static_cast<T>(m)) * static_cast<T>(rs)) * gamma[j] + beta[j];
    }
}

template <typename T>
void layer_norm_xhat(const T* x, std::int64_t n, int w, const T* mean, const T* rstd, T* xhat)
{
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t r = 0; r < n; ++r)
        for (int j = 0; j < w; ++j)
            xhat[r * w + j] = (x[r * w + j] - mean[r]) * rstd[r];
}

template <typename T>
void layer_norm_backward_data(const T* x, const T* dy, std::int64_t n, int w, const T* gamma, const T* mean,
                              const T* rstd, T* dx)
{
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t r = 0; r < n; ++r) {
        const T* xr = x + r * w;
        const T* dr = dy + r * w;
        double s1 = 0, s2 = 0; // sum(g), sum(g * xhat) with g = dy * gamma
#pragma omp simd reduction(+ : s1, s2)
        for (int j = 0; j < w; ++j) {
            const double g = static_cast<double>(dr[j]) * gamma[j];
            const double xh = (static_cast<double>(xr[j]) - mean[r]) * rstd[r];
            s1 += g;
            s2 += g * xh;
        }
        for (int j = 0; j < w; ++j) {
            const double g = static_cast<double>(dr[j]) * gamma[j];
            const double xh = (static_cast<double>(xr[j]) - mean[r]) * rstd[r];
            dx[r * w + j] = static_cast<T>(rstd[r] * (g - s1 / w - xh * s2 / w));
        }
    }
}

template <typename T>
void layer_norm_backward(const T* x, const T* dy, std::int64_t n, int w, const T* gamma, const T* mean, const T* rstd,
                         T* dx, T* d_gamma, T* d_beta)
{
    layer_norm_backward_data(x, dy, n, w, gamma, mean, rstd, dx);
    const int blocks = reduction_blocks(n);
    std::vector<T> pg(static_cast<std::size_t>(blocks) * w, T(0)), pb(static_cast<std::size_t>(blocks) * w, T(0));
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (int b = 0; b < blocks; ++b) {
        const auto [r0, r1] = block_range(n, blocks, b);
        T* g = pg.data() + static_cast<std::size_t>(b) * w;
        T* bb = pb.data() + static_cast<std::size_t>(b) * w;
        for (std::int64_t r = r0; r < r1; ++r)
            for (int j = 0; j < w; ++j) {
                g[j] += dy[r * w + j] * ((x[r * w + j] - mean[r]) * rstd[r]);
                bb[j] += dy[r * w + j];
            }
    }
    for (int j = 0; j < w; ++j) {
        T sg = 0, sb = 0;
        for (int b = 0; b < blocks; ++b) {
            sg += pg[static_cast<std::size_t>(b) * w + j];
            sb += pb[static_cast<std::size_t>(b) * w + j];
        }
        d_gamma[j] = sg;
        d_beta[j] = sb;
    }
}

template <typename T>
dropout_mask<T>::dropout_mask(double p, const dropout_key& key, std::int64_t col0, int w, std::int64_t mask_width)
    : rng_(key.rng()), threshold_(static_cast<std::uint64_t>(p * 65536.0)), scale_(static_cast<T>(1.0 / (1.0 - p))),
      // 16 bits per column, four columns per counter, counters numbered along the whole row.
      groups_((static_cast<std::uint64_t>(std::max(col0 + w, mask_width)) + 3) / 4), col0_(col0), w_(w)
{
}

template <typename T>
void dropout_mask<T>::row(const T* xr, node_t id, T* yr) const
{
    const std::uint64_t base = static_cast<std::uint64_t>(id) * groups_;
    const int w = w_;
    // The first counter's columns, if col0 starts inside one; then four at a time.
    const auto head = static_cast<int>(std::min<std::int64_t>((4 - col0_ % 4) % 4, w));
    if (head > 0) {
        const auto c = static_cast<std::uint64_t>(col0_);
        const std::uint64_t bits = rng_.bits(base + c / 4);
        for (int l = 0; l < head; ++l)
            yr[l] = ((bits >> (16 * (c % 4 + l))) & 0xFFFFU) >= threshold_ ? xr[l] * scale_ : T(0);
    }
    // Then 256 columns at a time: their 64 counters' bits first, read as 16-bit lanes
    // (little-endian, as the shifts above number them), so that both loops vectorise.
    const std::uint64_t g0 = static_cast<std::uint64_t>(col0_ + head) / 4;
    static_assert(std::endian::native == std::endian::little, "dropout masks read 16-bit lanes of 64-bit draws");
    std::uint16_t lanes[256];
    for (int j0 = head; j0 < w; j0 += 256) {
        const int count = std::min(256, w - j0);
        const std::uint64_t c0 = base + g0 + static_cast<std::uint64_t>(j0 - head) / 4;
        for (int k = 0; k < (count + 3) / 4; ++k) {
            const std::uint64_t bits = rng_.bits(c0 + static_cast<std::uint64_t>(k));
            std::memcpy(lanes + 4 * k, &bits, sizeof bits);
        }
        for (int j = 0; j < count; ++j)
            yr[j0 + j] = dropout_value(xr[j0 + j], scale_, lanes[j], threshold_);
    }
}

template <typename T>
void dropout_forward(const T* x, std::span<const node_t> row_ids, int w, double p, const dropout_key& key, T* y,
                     std::int64_t col0, std::int64_t mask_width)
{
    const auto n = static_cast<std::int64_t>(row_ids.size());
    if (p <= 0) {
        if (x != y) std::copy(x, x + n * w, y);
        return;
    }
    const dropout_mask<T> mask(p, key, col0, w, mask_width);
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t r = 0; r < n; ++r)
        mask.row(x + r * w, row_ids[r], y + r * w);
}

template <typename T>
void dropout_backward(const T* dy, std::span<const node_t> row_ids, int w, double p, const dropout_key& key, T* dx)
{
    dropout_forward(dy, row_ids, w, p, key, dx); // the same mask and scale
}

template <typename T>
void column_sums(const T* x, std::int64_t n, int w, T* out)
{
    const int blocks = reduction_blocks(n);
    std::vector<T> part(static_cast<std::size_t>(blocks) * w, T(0));
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (int b = 0; b < blocks; ++b) {
        const auto [r0, r1] = block_range(n, blocks, b);
        T* pb = part.data() + static_cast<std::size_t>(b) * w;
        for (std::int64_t r = r0; r < r1; ++r)
            for (int j = 0; j < w; ++j)
                pb[j] += x[r * w + j];
    }
    for (int j = 0; j < w; ++j) {
        T s = 0;
        for (int b = 0; b < blocks; ++b)
            s += part[static_cast<std::size_t>(b) * w + j];
        out[j] = s;
    }
}

template <typename T>
void gather_rows(const T* x, std::span<const node_t> rows, int w, T* out)
{
    const auto n = static_cast<std::int64_t>(rows.size());
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t i = 0; i < n; ++i)
        std::copy(x + static_cast<std::ptrdiff_t>(rows[i]) * w, x + static_cast<std::ptrdiff_t>(rows[i] + 1) * w,
                  out + i * w);
}

template <typename T>
void scatter_add_rows(const T* in, std::span<const node_t> rows, int w, T* x)
{
    const auto n = static_cast<std::int64_t>(rows.size());
#pragma omp parallel for schedule(static) if (parallel : worth_threads(n * w))
    for (std::int64_t i = 0; i < n; ++i) {
        T* xr = x + static_cast<std::ptrdiff_t>(rows[i]) * w;
        for (int j = 0; j < w; ++j)
            xr[j] += in[i * w + j];
    }
}

} // namespace retexo
