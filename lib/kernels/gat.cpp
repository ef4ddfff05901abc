// GAT attention: edge scores, softmax per destination, weighted sums, and their gradients.
#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/gat.hpp>

#include <algorithm>
#include <cmath>

namespace retexo {

namespace {

/// Prefetch `count` values (default: W) of row `row` of m (rows W apart): the row an edge
/// a few ahead reads, so that it arrives while the current edge is summed.
template <typename T>
inline void prefetch_row(const T* m, node_t row, std::ptrdiff_t W, std::ptrdiff_t count = -1)
{
    const char* p = reinterpret_cast<const char*>(m + static_cast<std::ptrdiff_t>(row) * W);
    for (std::size_t b = 0; b < static_cast<std::size_t>(count < 0 ? W : count) * sizeof(T); b += 64)
        __builtin_prefetch(p + b);
}

/// Shared source rows (gat_attention::forward_inputs): the columns summed per pass over a
/// row's edges, and the lanes of a dot's partial sums; with 4 heads at a time the partial
/// sums stay in registers (16 AVX-512 vectors of floats, 4 for the dots).  64 columns ran
/// 10-25% faster than 32 on amazon-computers' shapes; 8 heads at a time, slower.
constexpr int block_cols = 64;
constexpr int lane_count = 16;

/// o[h][c0, c0 + block_cols) = sum over edges [e0, e1) of alpha[e][h] x[src[e]][c0, ...] for
/// heads h0 .. h0 + HB (each element sums in edge order).
template <int HB, typename T>
void shared_sums(const node_t* src, offset_t e0, offset_t e1, const T* alpha, int H, int h0, const T* x,
                 std::ptrdiff_t stride, int c0, T* o, std::ptrdiff_t out_head)
{
    T acc[HB][block_cols] = {};
    for (offset_t e = e0; e < e1; ++e) {
        const T* xu = x + static_cast<std::ptrdiff_t>(src[e]) * stride + c0;
        if (e + 8 < e1) prefetch_row(x + c0, src[e + 8], stride, block_cols);
        for (int hb = 0; hb < HB; ++hb) {
            const T a = alpha[e * H + h0 + hb];
#pragma omp simd
            for (int k = 0; k < block_cols; ++k)
                acc[hb][k] += a * xu[k];
        }
    }
    for (int hb = 0; hb < HB; ++hb)
        std::copy(acc[hb], acc[hb] + block_cols, o + (h0 + hb) * out_head + c0);
}

/// da[hb] = <d_out[h0 + hb], x_u> over `width` columns, for heads h0 .. h0 + HB (d_out's
/// heads out_head apart).
template <int HB, typename T>
void shared_dots(const T* d_out, std::ptrdiff_t out_head, const T* xu, int width, int h0, T* da)
{
    T lanes[HB][lane_count] = {};
    int d = 0;
    for (; d + lane_count <= width; d += lane_count)
        for (int hb = 0; hb < HB; ++hb) {
            const T* dh = d_out + (h0 + hb) * out_head + d;
#pragma omp simd
            for (int k = 0; k < lane_count; ++k)
                lanes[hb][k] += dh[k] * xu[d + k];
        }
    for (int hb = 0; hb < HB; ++hb) {
        const T* dh = d_out + (h0 + hb) * out_head;
        T sum = 0;
        for (int k = 0; k < lane_count; ++k)
            sum += lanes[hb][k];
        for (int k = d; k < width; ++k)
            sum += dh[k] * xu[k];
        da[hb] = sum;
    }
}

} // namespace

gat_attention::gat_attention(const csr& g, node_t num_src, const gat_options& o)
    : heads_(o.heads), slope_(o.negative_slope), num_src_(num_src)
{
    RETEXO_ENSURE(o.heads >= 1, "retexo::gat_attention: heads must be positive, got " << o.heads);
    rows_ = rows_or_all(o.rows, g.num_rows());
    plan_ = in_edges_of_rows(g, num_src, rows_, o.self_loops, "retexo::gat_attention");
    // Transpose: for each source row the plan edges leaving it.
    RETEXO_ENSURE(plan_.num_edges() < (offset_t{1} << 31), "retexo::gat_attention: more than 2^31 edges");
    std::vector<offset_t> edge_of;
    csr back = transpose(plan_, num_src, &edge_of);
    back_out_ = std::move(back.sources);
    back_.offsets = std::move(back.offsets);
    back_.sources.resize(edge_of.size()); // edge ids fit: checked above
    for (std::size_t t = 0; t < edge_of.size(); ++t)
        back_.sources[t] = static_cast<node_t>(edge_of[t]);
}

template <typename T>
gat_attention::source_layout<T> gat_attention::message_layout(const T* msg, int head_dim) const
{
    const int W = heads_ * head_dim, M = W + heads_;
    return {msg, M, head_dim, head_dim, msg + W, M, head_dim, W};
}

template <typename T>
gat_attention::source_layout<T> gat_attention::inputs_layout(const T* x, int width, const T* el) const
{
    return {x, width, 0, width, el, heads_, static_cast<std::ptrdiff_t>(num_out()) * width, width};
}

template <typename T>
void gat_attention::forward(const T* msg, const T* er, int head_dim, T* out, T* alpha) const
{
    const int W = heads_ * head_dim, M = W + heads_;
    check_finite("gat_attention::forward", "messages", msg, static_cast<std::size_t>(num_src_) * M);
    forward(message_layout(msg, head_dim), er, out, alpha);
}

template <typename T>
void gat_attention::forward_inputs(const T* x, int width, const T* el, const T* er, T* y, T* alpha) const
{
    check_finite("gat_attention::forward_inputs", "inputs", x, static_cast<std::size_t>(num_src_) * width);
    forward(inputs_layout(x, width, el), er, y, alpha);
}

template <typename T>
void gat_attention::forward(const source_layout<T>& s, const T* er, T* out, T* alpha) const
{
    const int H = heads_, D = s.width;
    const auto& off = plan_.offsets;
    const auto& src = plan_.sources;
    const T slope = static_cast<T>(slope_);
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(src.size()) * (H * D + H)))
    {
        std::vector<T> mx(static_cast<std::size_t>(H)), sum(static_cast<std::size_t>(H));
#pragma omp for schedule(dynamic, 128)
        for (node_t i = 0; i < num_out(); ++i) {
            const node_t v = rows_[i];
            const offset_t e0 = off[i], e1 = off[i + 1];
            T* o = out + static_cast<std::ptrdiff_t>(i) * s.out_row;
            for (int h = 0; h < H; ++h)
                std::fill(o + h * s.out_head, o + h * s.out_head + D, T(0));
            if (e0 == e1) continue;
            const T* erv = er + static_cast<std::ptrdiff_t>(v) * H;
            std::fill(mx.begin(), mx.end(), -std::numeric_limits<T>::infinity());
            std::fill(sum.begin(), sum.end(), T(0));
            // Scores for all heads of an edge at once.
            for (offset_t e = e0; e < e1; ++e) {
                const T* elu = s.el + static_cast<std::ptrdiff_t>(src[e]) * s.el_stride;
                T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T sc = elu[h] + erv[h];
                    a[h] = sc > 0 ? sc : slope * sc;
                    mx[h] = std::max(mx[h], a[h]);
                }
            }
            for (offset_t e = e0; e < e1; ++e)
                for (int h = 0; h < H; ++h)
                    alpha[e * H + h] -= mx[h];
            // One flat loop over the row's scores so exp vectorises (libmvec).
            T* row_scores = alpha + e0 * H;
            const std::int64_t count = (e1 - e0) * H;
#pragma omp simd
            for (std::int64_t k = 0; k < count; ++k)
                row_scores[k] = vexp(row_scores[k]);
            for (offset_t e = e0; e < e1; ++e)
                for (int h = 0; h < H; ++h)
                    sum[h] += alpha[e * H + h];
            for (int h = 0; h < H; ++h)
                sum[h] = T(1) / sum[h];
            for (offset_t e = e0; e < e1; ++e)
                for (int h = 0; h < H; ++h)
                    alpha[e * H + h] *= sum[h];
            if (s.head_offset == 0) {
                shared_forward_sums(s, e0, e1, alpha, o);
                continue;
            }
            for (offset_t e = e0; e < e1; ++e) {
                if (e + 4 < e1) prefetch_row(s.values, src[e + 4], s.value_stride);
                const T* zu = s.values + static_cast<std::ptrdiff_t>(src[e]) * s.value_stride;
                const T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T ah = a[h];
                    T* oh = o + h * s.out_head;
                    const T* zh = zu + h * s.head_offset;
#pragma omp simd
                    for (int d = 0; d < D; ++d)
                        oh[d] += ah * zh[d];
                }
            }
        }
    }
}

template <typename T>
void gat_attention::shared_forward_sums(const source_layout<T>& s, offset_t e0, offset_t e1, const T* alpha, T* o) const
{
    const int H = heads_, D = s.width;
    const node_t* src = plan_.sources.data();
    // Blocks of block_cols columns; the last one ends at D, overlapping the one before (its
    // columns computed again, the same way).
    for (int c = 0; c < D; c += block_cols) {
        const int c0 = std::min(c, D - block_cols);
        if (c0 < 0) break; // fewer columns than a block
        int h0 = 0;
        for (; h0 + 4 <= H; h0 += 4)
            shared_sums<4>(src, e0, e1, alpha, H, h0, s.values, s.value_stride, c0, o, s.out_head);
        for (; h0 < H; ++h0)
            shared_sums<1>(src, e0, e1, alpha, H, h0, s.values, s.value_stride, c0, o, s.out_head);
    }
    if (D >= block_cols) return;
    for (offset_t e = e0; e < e1; ++e) { // o is zero
        const T* xu = s.values + static_cast<std::ptrdiff_t>(src[e]) * s.value_stride;
        for (int h = 0; h < H; ++h) {
            const T ah = alpha[e * H + h];
            T* oh = o + h * s.out_head;
            for (int d = 0; d < D; ++d)
                oh[d] += ah * xu[d];
        }
    }
}

template <typename T>
void gat_attention::edge_gradients(const source_layout<T>& s, const T* er, const T* alpha, const T* d_out, T* d_er,
                                   T* d_score) const
{
    const int H = heads_, D = s.width, W = H * D;
    const bool shared = s.head_offset == 0; // one input row for every head (else [z | el] rows)
    const auto& off = plan_.offsets;
    const auto& src = plan_.sources;
    const T slope = static_cast<T>(slope_);
    std::fill(d_er, d_er + static_cast<std::ptrdiff_t>(num_src_) * H, T(0));
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(src.size()) * (W + H)))
    {
        std::vector<T> dot_sum(static_cast<std::size_t>(H)), der(static_cast<std::size_t>(H)),
            prod(static_cast<std::size_t>(shared ? 0 : W));
#pragma omp for schedule(dynamic, 128)
        for (node_t i = 0; i < num_out(); ++i) {
            const node_t v = rows_[i];
            const T* dov = d_out + static_cast<std::ptrdiff_t>(i) * s.out_row;
            const offset_t e0 = off[i], e1 = off[i + 1];
            std::fill(dot_sum.begin(), dot_sum.end(), T(0));
            // d_alpha_e[h] = <d_out_v[h], z_u[h]>, all heads of an edge from one row read.
            for (offset_t e = e0; e < e1; ++e) {
                if (e + 4 < e1) prefetch_row(s.values, src[e + 4], s.value_stride);
                const T* zu = s.values + static_cast<std::ptrdiff_t>(src[e]) * s.value_stride;
                T* ds = d_score + e * H;
                const T* a = alpha + e * H;
                if (shared) { // H dots of one input row, 4 heads at a time
                    int h0 = 0;
                    for (; h0 + 4 <= H; h0 += 4)
                        shared_dots<4>(dov, s.out_head, zu, D, h0, ds + h0);
                    for (; h0 < H; ++h0)
                        shared_dots<1>(dov, s.out_head, zu, D, h0, ds + h0);
                    for (int h = 0; h < H; ++h)
                        dot_sum[h] += a[h] * ds[h];
                    continue;
                }
#pragma omp simd
                for (int k = 0; k < W; ++k)
                    prod[k] = dov[k] * zu[k];
                for (int h = 0; h < H; ++h) {
                    T da = 0;
                    for (int d = 0; d < D; ++d)
                        da += prod[h * D + d];
                    ds[h] = da;
                    dot_sum[h] += a[h] * da;
                }
            }
            // Softmax and LeakyReLU backward.
            const T* erv = er + static_cast<std::ptrdiff_t>(v) * H;
            std::fill(der.begin(), der.end(), T(0));
            for (offset_t e = e0; e < e1; ++e) {
                const T* elu = s.el + static_cast<std::ptrdiff_t>(src[e]) * s.el_stride;
                T* ds = d_score + e * H;
                const T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T de = a[h] * (ds[h] - dot_sum[h]);
                    const T sc = elu[h] + erv[h];
                    ds[h] = sc > 0 ? de : slope * de;
                    der[h] += ds[h];
                }
            }
            std::copy(der.begin(), der.end(), d_er + static_cast<std::ptrdiff_t>(v) * H);
        }
    }
}

template <typename T>
void gat_attention::backward_inputs(const T* x, int width, const T* el, const T* er, const T* alpha, const T* d_y,
                                    T* d_el, T* d_er, T* d_score) const
{
    const int H = heads_;
    const std::ptrdiff_t per_head = static_cast<std::ptrdiff_t>(num_out()) * width;
    check_finite("gat_attention::backward_inputs", "d_y", d_y, static_cast<std::size_t>(per_head) * H);
    edge_gradients(inputs_layout(x, width, el), er, alpha, d_y, d_er, d_score);
    // d_el_u = the sum of d_score over the edges leaving u, in the transposed plan's order.
#pragma omp parallel for schedule(static) if (worth_threads(static_cast <std::int64_t>(back_.sources.size()) * H))
    for (node_t u = 0; u < num_src_; ++u) {
        T* gl = d_el + static_cast<std::ptrdiff_t>(u) * H;
        std::fill(gl, gl + H, T(0));
        for (offset_t t = back_.offsets[u]; t < back_.offsets[u + 1]; ++t)
            for (int h = 0; h < H; ++h)
                gl[h] += d_score[static_cast<std::ptrdiff_t>(back_.sources[t]) * H + h];
    }
}

template <typename T>
void gat_attention::backward(const T* msg, const T* er, const T* alpha, const T* d_out, int head_dim, T* d_msg, T* d_er,
                             T* d_score) const
{
    const int H = heads_;
    const int W = H * head_dim, M = W + H;
    check_finite("gat_attention::backward", "d_out", d_out, static_cast<std::size_t>(num_out()) * W);
    edge_gradients(message_layout(msg, head_dim), er, alpha, d_out, d_er, d_score);
#pragma omp parallel for schedule(dynamic, 128) if (worth_threads(static_cast <std::int64_t>(back_.sources.size()) * M))
    for (node_t u = 0; u < num_src_; ++u) {
        T* gz = d_msg + static_cast<std::ptrdiff_t>(u) * M;
        T* gl = gz + W;
        std::fill(gz, gz + M, T(0));
        for (offset_t t = back_.offsets[u]; t < back_.offsets[u + 1]; ++t) {
            if (t + 4 < back_.offsets[u + 1]) {
                prefetch_row(d_out, back_out_[t + 4], W);
                __builtin_prefetch(alpha + static_cast<std::ptrdiff_t>(back_.sources[t + 4]) * H);
                __builtin_prefetch(d_score + static_cast<std::ptrdiff_t>(back_.sources[t + 4]) * H);
            }
            const offset_t e = back_.sources[t];
            const T* dov = d_out + static_cast<std::ptrdiff_t>(back_out_[t]) * W;
            for (int h = 0; h < H; ++h) {
                const T a = alpha[e * H + h];
                gl[h] += d_score[e * H + h];
#pragma omp simd
                for (int d = 0; d < head_dim; ++d)
                    gz[h * head_dim + d] += a * dov[h * head_dim + d];
            }
        }
    }
}

void gat_attention::backward_exact(const float* msg, const float* er, const float* alpha, const float* d_out,
                                   int head_dim, int k, std::int64_t* acc, float* d_er, float* d_score) const
{
    const int H = heads_;
    const int W = H * head_dim, M = W + H;
    const double scale = std::ldexp(1.0, k);
    edge_gradients(message_layout(msg, head_dim), er, alpha, d_out, d_er, d_score);
#pragma omp parallel for schedule(dynamic, 128) if (worth_threads(static_cast <std::int64_t>(back_.sources.size()) * M))
    for (node_t u = 0; u < num_src_; ++u) {
        std::int64_t* gz = acc + static_cast<std::ptrdiff_t>(u) * M;
        std::int64_t* gl = gz + W;
        for (offset_t t = back_.offsets[u]; t < back_.offsets[u + 1]; ++t) {
            const offset_t e = back_.sources[t];
            const float* dov = d_out + static_cast<std::ptrdiff_t>(back_out_[t]) * W;
            for (int h = 0; h < H; ++h) {
                const double a = static_cast<double>(alpha[e * H + h]) * scale;
                gl[h] += exact::fixed(static_cast<double>(d_score[e * H + h]), scale);
                for (int d = 0; d < head_dim; ++d)
                    gz[h * head_dim + d] += static_cast<std::int64_t>(a * static_cast<double>(dov[h * head_dim + d]));
            }
        }
    }
}

namespace reference {
template <typename T>
void gat_forward(const gat_attention& plan, const T* msg, const T* er, int head_dim, double slope, T* out)
{
    const int H = plan.heads();
    const int W = H * head_dim, M = W + H;
    const auto& g = plan.edges();
    const auto rows = plan.out_rows();
    for (node_t i = 0; i < plan.num_out(); ++i) {
        const node_t v = rows[i];
        for (int h = 0; h < H; ++h) {
            std::vector<double> s;
            for (offset_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
                double x = static_cast<double>(msg[static_cast<std::ptrdiff_t>(g.sources[e]) * M + W + h]) +
                           static_cast<double>(er[static_cast<std::ptrdiff_t>(v) * H + h]);
                s.push_back(x > 0 ? x : slope * x);
            }
            double mx = -1e300, sum = 0;
            for (double x : s)
                mx = std::max(mx, x);
            for (double& x : s)
                sum += (x = std::exp(x - mx));
            for (int d = 0; d < head_dim; ++d) {
                double acc = 0;
                for (offset_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e)
                    acc += s[static_cast<std::size_t>(e - g.offsets[i])] / sum *
                           static_cast<double>(msg[static_cast<std::ptrdiff_t>(g.sources[e]) * M + h * head_dim + d]);
                out[static_cast<std::ptrdiff_t>(i) * W + h * head_dim + d] = static_cast<T>(acc);
            }
        }
    }
}
template void gat_forward<float>(const gat_attention&, const float*, const float*, int, double, float*);
template void gat_forward<double>(const gat_attention&, const double*, const double*, int, double, double*);
} // namespace reference

template void gat_attention::forward<float>(const float*, const float*, int, float*, float*) const;
template void gat_attention::forward<double>(const double*, const double*, int, double*, double*) const;
template void gat_attention::backward<float>(const float*, const float*, const float*, const float*, int, float*,
                                             float*, float*) const;
template void gat_attention::backward<double>(const double*, const double*, const double*, const double*, int, double*,
                                              double*, double*) const;
template void gat_attention::forward_inputs<float>(const float*, int, const float*, const float*, float*, float*) const;
template void gat_attention::forward_inputs<double>(const double*, int, const double*, const double*, double*,
                                                    double*) const;
template void gat_attention::backward_inputs<float>(const float*, int, const float*, const float*, const float*,
                                                    const float*, float*, float*, float*) const;
template void gat_attention::backward_inputs<double>(const double*, int, const double*, const double*, const double*,
                                                     const double*, double*, double*, double*) const;

} // namespace retexo
