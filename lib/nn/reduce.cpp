// Weight and bias gradients in fast or exact (fixed-point) form, and the scale exact sums use.
#include <retexo/kernels/dense.hpp>
#include <retexo/nn/reduce.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace retexo::nn {

int reduce_mode::scale_for(std::initializer_list<double> local_max) const
{
    std::vector<double> m(local_max);
    global_max(m);
    double bound = global_terms;
    for (double v : m)
        bound *= v;
    return exact::scale_exponent(bound);
}

namespace {

/// The rows of D (n x b) with a nonzero entry.  Only they add to X^T D, so only their rows of
/// X bound the fixed-point scale: which other rows are present (all of a rank's rows, a
/// gathered neighbourhood) must not change the exact sum.
std::vector<std::int64_t> live_rows(const float* d, std::int64_t n, int b)
{
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < n; ++i)
        if (exact::max_abs(d + i * b, static_cast<std::size_t>(b)) > 0) rows.push_back(i);
    return rows;
}

/// max |x| over the given rows of a dense (n x a) or sparse block.
float max_abs_rows(const float* x, int a, std::span<const std::int64_t> rows)
{
    float m = 0;
    for (std::int64_t i : rows)
        m = std::max(m, exact::max_abs(x + i * a, static_cast<std::size_t>(a)));
    return m;
}
float max_abs_rows(const csr_matrix& x, std::span<const std::int64_t> rows)
{
    float m = 0;
    for (std::int64_t i : rows)
        m = std::max(m, exact::max_abs(x.values.data() + x.offsets[static_cast<std::size_t>(i)],
                                       static_cast<std::size_t>(x.row_nnz(i))));
    return m;
}

} // namespace

template <>
void weight_gradient<float>(parameter<float>& p, const linear_kernel& kernel, const float* x, const float* d,
                            std::int64_t n, const reduce_mode& mode)
{
    const auto a = static_cast<int>(p.value.rows());
    const auto b = static_cast<int>(p.value.cols());
    if (!mode.exact) {
        kernel.backward_weights(x, d, n, p.grad.data(), static_cast<decltype(p.grad.data())>(nullptr));
        return;
    }
    p.exact_k =
        mode.scale_for({max_abs_rows(x, a, live_rows(d, n, b)), exact::max_abs(d, static_cast<std::size_t>(n) * b)});
    p.exact.assign(static_cast<std::size_t>(p.size()), 0);
    exact::gemm_tn(x, d, n, a, b, p.exact_k, p.exact.data());
}

template <>
void weight_gradient<double>(parameter<double>& p, const linear_kernel& kernel, const double* x, const double* d,
                             std::int64_t n, const reduce_mode&)
{
    kernel.backward_weights(x, d, n, p.grad.data(), static_cast<decltype(p.grad.data())>(nullptr));
}

namespace {

/// weight_gradient of sparse rows or column blocks: the kernel's product (fast mode), or the
/// fixed-point sums of each block's rows of dW (exact mode); blocks(f) calls f(block, col0)
/// for every dense or sparse block of x.
template <typename X, typename Blocks>
void blockwise_weight_gradient(parameter<float>& p, const linear_kernel& kernel, const X& x, const Blocks& blocks,
                               const float* d, const reduce_mode& mode)
{
    const auto b = static_cast<int>(p.value.cols());
    if (!mode.exact) {
        kernel.backward_weights(x, d, p.grad.data());
        return;
    }
    const auto n = rows_of(x);
    const auto live = live_rows(d, n, b);
    float x_max = 0;
    blocks([&]<typename B>(const B& block, Eigen::Index) {
        if constexpr (std::is_same_v<B, matrix_f>)
            x_max = std::max(x_max, max_abs_rows(block.data(), static_cast<int>(block.cols()), live));
        else
            x_max = std::max(x_max, max_abs_rows(block, live));
    });
    p.exact_k = mode.scale_for({x_max, exact::max_abs(d, static_cast<std::size_t>(n) * b)});
    p.exact.assign(static_cast<std::size_t>(p.size()), 0);
    blocks([&]<typename B>(const B& block, Eigen::Index col0) {
        std::int64_t* acc = p.exact.data() + col0 * b;
        if constexpr (std::is_same_v<B, matrix_f>)
            exact::gemm_tn(block.data(), d, n, static_cast<int>(block.cols()), b, p.exact_k, acc);
        else
            exact::sparse_gemm_tn(block, d, b, p.exact_k, acc);
    });
}

} // namespace

void weight_gradient(parameter<float>& p, const linear_kernel& kernel, const csr_matrix& x, const float* d,
                     const reduce_mode& mode)
{
    blockwise_weight_gradient(
        p, kernel, x, [&](const auto& f) { f(x, Eigen::Index{0}); }, d, mode);
}

void weight_gradient(parameter<float>& p, const linear_kernel& kernel, const column_blocks& x, const float* d,
                     const reduce_mode& mode)
{
    blockwise_weight_gradient(
        p, kernel, x, [&](const auto& f) { x.for_each(f); }, d, mode);
}

template <>
void bias_gradient<float>(parameter<float>& p, const float* d, std::int64_t n, const reduce_mode& mode)
{
    const auto w = static_cast<int>(p.size());
    if (!mode.exact) {
        column_sums(d, n, w, p.grad.data());
        return;
    }
    p.exact_k = mode.scale_for({1.0, exact::max_abs(d, static_cast<std::size_t>(n) * w)});
    p.exact.assign(static_cast<std::size_t>(w), 0);
    exact::colsum(d, n, w, p.exact_k, p.exact.data());
}

template <>
void bias_gradient<double>(parameter<double>& p, const double* d, std::int64_t n, const reduce_mode&)
{
    column_sums(d, n, static_cast<int>(p.size()), p.grad.data());
}

template <typename T>
void finish_exact_gradient(parameter<T>& p)
{
    if (p.exact.empty()) return;
    exact::to_real(p.exact.data(), p.exact.size(), p.exact_k, p.grad.data());
}

template void finish_exact_gradient<float>(parameter<float>&);
template void finish_exact_gradient<double>(parameter<double>&);

} // namespace retexo::nn
