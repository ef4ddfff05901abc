// GAT attention: edge scores, softmax per destination, weighted sums, and their gradients.
#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/gat.hpp>

#include <algorithm>
#include <cmath>

namespace retexo {

namespace {

/// Prefetch row `row` (W values) of m: the row an edge four ahead reads, so that it arrives
/// while the current edge is summed.
template <typename T>
inline void prefetch_row(const T* m, node_t row, int W)
{
    const char* p = reinterpret_cast<const char*>(m + static_cast<std::ptrdiff_t>(row) * W);
    for (std::size_t b = 0; b < W * sizeof(T); b += 64)
        __builtin_prefetch(p + b);
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
void gat_attention::forward(const T* msg, const T* er, int head_dim, T* out, T* alpha) const
{
    const int H = heads_;
    const int W = H * head_dim, M = W + H;
    check_finite("gat_attention::forward", "messages", msg, static_cast<std::size_t>(num_src_) * M);
    const auto& off = plan_.offsets;
    const auto& src = plan_.sources;
    const T slope = static_cast<T>(slope_);
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(src.size()) * M))
    {
        std::vector<T> mx(static_cast<std::size_t>(H)), sum(static_cast<std::size_t>(H));
#pragma omp for schedule(dynamic, 128)
        for (node_t i = 0; i < num_out(); ++i) {
            const node_t v = rows_[i];
            const offset_t e0 = off[i], e1 = off[i + 1];
            T* o = out + static_cast<std::ptrdiff_t>(i) * W;
            std::fill(o, o + W, T(0));
            if (e0 == e1) continue;
            const T* erv = er + static_cast<std::ptrdiff_t>(v) * H;
            std::fill(mx.begin(), mx.end(), -std::numeric_limits<T>::infinity());
            std::fill(sum.begin(), sum.end(), T(0));
            // Scores for all heads of an edge at once.
            for (offset_t e = e0; e < e1; ++e) {
                const T* elu = msg + static_cast<std::ptrdiff_t>(src[e]) * M + W;
                T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T s = elu[h] + erv[h];
                    a[h] = s > 0 ? s : slope * s;
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
            for (offset_t e = e0; e < e1; ++e) {
                if (e + 4 < e1) prefetch_row(msg, src[e + 4], M);
                const T* zu = msg + static_cast<std::ptrdiff_t>(src[e]) * M;
                T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T ah = (a[h] *= sum[h]);
                    T* oh = o + h * head_dim;
                    const T* zh = zu + h * head_dim;
#pragma omp simd
                    for (int d = 0; d < head_dim; ++d)
                        oh[d] += ah * zh[d];
                }
            }
        }
    }
}

template <typename T>
void gat_attention::edge_gradients(const T* msg, const T* er, const T* alpha, const T* d_out, int head_dim, T* d_er,
                                   T* d_score) const
{
    const int H = heads_;
    const int W = H * head_dim, M = W + H;
    const auto& off = plan_.offsets;
    const auto& src = plan_.sources;
    const T slope = static_cast<T>(slope_);
    std::fill(d_er, d_er + static_cast<std::ptrdiff_t>(num_src_) * H, T(0));
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(src.size()) * M))
    {
        std::vector<T> dot_sum(static_cast<std::size_t>(H)), der(static_cast<std::size_t>(H)),
            prod(static_cast<std::size_t>(W));
#pragma omp for schedule(dynamic, 128)
        for (node_t i = 0; i < num_out(); ++i) {
            const node_t v = rows_[i];
            const T* dov = d_out + static_cast<std::ptrdiff_t>(i) * W;
            const offset_t e0 = off[i], e1 = off[i + 1];
            std::fill(dot_sum.begin(), dot_sum.end(), T(0));
            // d_alpha_e[h] = <d_out_v[h], z_u[h]>, all heads of an edge from one row read.
            for (offset_t e = e0; e < e1; ++e) {
                if (e + 4 < e1) prefetch_row(msg, src[e + 4], M);
                const T* zu = msg + static_cast<std::ptrdiff_t>(src[e]) * M;
                T* ds = d_score + e * H;
                const T* a = alpha + e * H;
#pragma omp simd
                for (int k = 0; k < W; ++k)
                    prod[k] = dov[k] * zu[k];
                for (int h = 0; h < H; ++h) {
                    T da = 0;
                    for (int d = 0; d < head_dim; ++d)
                        da += prod[h * head_dim + d];
                    ds[h] = da;
                    dot_sum[h] += a[h] * da;
                }
            }
            // Softmax and LeakyReLU backward.
            const T* erv = er + static_cast<std::ptrdiff_t>(v) * H;
            std::fill(der.begin(), der.end(), T(0));
            for (offset_t e = e0; e < e1; ++e) {
                const T* elu = msg + static_cast<std::ptrdiff_t>(src[e]) * M + W;
                T* ds = d_score + e * H;
                const T* a = alpha + e * H;
                for (int h = 0; h < H; ++h) {
                    const T de = a[h] * (ds[h] - dot_sum[h]);
                    const T s = elu[h] + erv[h];
                    ds[h] = s > 0 ? de : slope * de;
                    der[h] += ds[h];
                }
            }
            std::copy(der.begin(), der.end(), d_er + static_cast<std::ptrdiff_t>(v) * H);
        }
    }
}

template <typename T>
void gat_attention::backward(const T* msg, const T* er, const T* alpha, const T* d_out, int head_dim, T* d_msg, T* d_er,
                             T* d_score) const
{
    const int H = heads_;
    const int W = H * head_dim, M = W + H;
    check_finite("gat_attention::backward", "d_out", d_out, static_cast<std::size_t>(num_out()) * W);
    edge_gradients(msg, er, alpha, d_out, head_dim, d_er, d_score);
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
    edge_gradients(msg, er, alpha, d_out, head_dim, d_er, d_score);
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

} // namespace retexo
