// Sparse x dense products (forward, weight gradient), dropout on stored values, row gathers.
#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/row_sums.hpp>
#include <retexo/kernels/sparse.hpp>

#include <optional>

#include <omp.h>

#include <algorithm>
#include <numeric>

namespace retexo {

namespace {

/// f(i, e) for every entry e (row i) of x, the columns split into one range per thread:
/// each column's entries are visited in ascending row order by one thread, whatever the
/// thread count (the sums of x^T d are the same bits).  No transposed copy of x.  `width`:
/// the values f updates per entry.
template <typename F>
void by_column_ranges(const csr_matrix& x, int width, const F& f)
{
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(x.values.size()) * width))
    {
        const std::int64_t t = omp_get_thread_num();
        const std::int64_t n = omp_get_num_threads();
        const std::int64_t j0 = x.cols * t / n;
        const std::int64_t j1 = x.cols * (t + 1) / n;
        for (std::int64_t i = 0; i < x.rows; ++i)
            for (offset_t e = x.offsets[i]; e < x.offsets[i + 1]; ++e)
                if (x.indices[e] >= j0 && x.indices[e] < j1) f(i, e);
    }
}

/// x's entries by column: column j's are [start[j], start[j + 1]) of (row, value), rows
/// ascending.  A counting sort; the buffers are kept between calls.
struct column_order {
    std::vector<offset_t> start;
    std::vector<node_t> row;
    std::vector<float> value;

    void build(const csr_matrix& x)
    {
        start.assign(static_cast<std::size_t>(x.cols) + 1, 0);
        for (std::int32_t j : x.indices)
            ++start[static_cast<std::size_t>(j) + 1];
        std::partial_sum(start.begin(), start.end(), start.begin());
        row.resize(x.values.size());
        value.resize(x.values.size());
        for (std::int64_t i = 0; i < x.rows; ++i)
            for (offset_t e = x.offsets[i]; e < x.offsets[i + 1]; ++e) {
                const auto t = static_cast<std::size_t>(start[static_cast<std::size_t>(x.indices[e])]++);
                row[t] = static_cast<node_t>(i);
                value[t] = x.values[e];
            }
        std::copy_backward(start.begin(), start.end() - 1, start.end()); // start[j] was column j's end
        start[0] = 0;
    }
};

/// A thread's entries of x's rows [r0, r1) in columns [j0, j1), by column: column j0 + c's
/// are [start[c], start[c + 1]) of (row - r0, value), rows ascending.  A counting sort into
/// buffers kept between calls.
struct column_block {
    std::vector<offset_t> start;
    std::vector<node_t> row;
    std::vector<float> value;

    /// False when the block holds no entry.
    bool build(const csr_matrix& x, std::int64_t r0, std::int64_t r1, std::int64_t j0, std::int64_t j1)
    {
        start.assign(static_cast<std::size_t>(j1 - j0) + 1, 0);
        for (offset_t e = x.offsets[r0]; e < x.offsets[r1]; ++e)
            if (x.indices[e] >= j0 && x.indices[e] < j1) ++start[static_cast<std::size_t>(x.indices[e] - j0) + 1];
        std::partial_sum(start.begin(), start.end(), start.begin());
        if (start.back() == 0) return false;
        row.resize(static_cast<std::size_t>(start.back()));
        value.resize(row.size());
        for (std::int64_t i = r0; i < r1; ++i)
            for (offset_t e = x.offsets[i]; e < x.offsets[i + 1]; ++e) {
                if (x.indices[e] < j0 || x.indices[e] >= j1) continue;
                const auto t = static_cast<std::size_t>(start[static_cast<std::size_t>(x.indices[e] - j0)]++);
                row[t] = static_cast<node_t>(i - r0);
                value[t] = x.values[e];
            }
        std::copy_backward(start.begin(), start.end() - 1, start.end()); // start[c] was column c's end
        start[0] = 0;
        return true;
    }
};

/// sparse_linear_backward_weights for a dy of up to a few MB, read in place: x sorted by
/// column (serially), each row of dw the sum of its column's entries.
void weight_gradient_by_columns(const csr_matrix& x, const float* dy, int out, float* dw)
{
    thread_local column_order order;
    order.build(x);
    const auto& o = order;
#pragma omp parallel for schedule(dynamic, 64) if (worth_threads(static_cast <std::int64_t>(x.values.size()) * out))
    for (std::int64_t j = 0; j < x.cols; ++j) {
        float* dwj = dw + j * out;
        std::fill(dwj, dwj + out, 0.0F);
        detail::add_terms(
            o.start[static_cast<std::size_t>(j)], o.start[static_cast<std::size_t>(j) + 1],
            [&](offset_t t) { return o.value[static_cast<std::size_t>(t)]; },
            [&](offset_t t) { return dy + static_cast<std::ptrdiff_t>(o.row[static_cast<std::size_t>(t)]) * out; }, out,
            dwj);
    }
}

/// sparse_linear_backward_weights for a larger dy: each thread owns a range of dw's rows (x's
/// columns) and adds their terms block by block of about 16 entries per column (128-1024 of
/// x's rows), each block's entries sorted by column and dy's block rows copied block_columns
/// wide at a time into a buffer that stays in L1/L2 (13,752 x 767 rows at 17% non-zero: 2.3x
/// faster than by columns).
void weight_gradient_by_blocks(const csr_matrix& x, const float* dy, int out, float* dw)
{
    const auto block = static_cast<std::int64_t>(std::clamp(16 / std::max(x.density(), 1e-9), 128.0, 1024.0));
#pragma omp parallel if (worth_threads(static_cast <std::int64_t>(x.values.size()) * out))
    {
        const std::int64_t t = omp_get_thread_num();
        const std::int64_t n = omp_get_num_threads();
        const std::int64_t j0 = x.cols * t / n;
        const std::int64_t j1 = x.cols * (t + 1) / n;
        std::fill(dw + j0 * out, dw + j1 * out, 0.0F);
        thread_local column_block cb;
        thread_local std::vector<float> packed;
        for (std::int64_t r0 = 0; r0 < x.rows; r0 += block) {
            const std::int64_t r1 = std::min(x.rows, r0 + block);
            if (!cb.build(x, r0, r1, j0, j1)) continue;
            for (int c0 = 0; c0 < out; c0 += detail::block_columns) {
                const int cw = std::min(detail::block_columns, out - c0);
                packed.resize(static_cast<std::size_t>((r1 - r0) * cw));
                for (std::int64_t i = r0; i < r1; ++i)
                    std::copy_n(dy + i * out + c0, cw, packed.data() + (i - r0) * cw);
                for (std::int64_t c = 0; c < j1 - j0; ++c) {
                    const auto s = static_cast<std::size_t>(c);
                    if (cb.start[s + 1] == cb.start[s]) continue;
                    detail::add_terms(
                        cb.start[s], cb.start[s + 1], [&](offset_t q) { return cb.value[static_cast<std::size_t>(q)]; },
                        [&](offset_t q) {
                            return packed.data() +
                                   static_cast<std::ptrdiff_t>(cb.row[static_cast<std::size_t>(q)]) * cw;
                        },
                        cw, dw + (j0 + c) * out + c0);
                }
            }
        }
    }
}

} // namespace

void sparse_linear_forward(const csr_matrix& x, const float* w, int out, const float* b, float* y, bool accumulate)
{
    check_finite("sparse_linear::forward", "x", x.values.data(), x.values.size());
#pragma omp parallel for schedule(dynamic, 16) if (worth_threads(static_cast <std::int64_t>(x.values.size()) * out))
    for (std::int64_t i = 0; i < x.rows; ++i) {
        float* yi = y + i * out;
        if (accumulate) {
            if (b != nullptr)
                for (int k = 0; k < out; ++k)
                    yi[k] += b[k];
        } else if (b != nullptr) {
            std::copy(b, b + out, yi);
        } else {
            std::fill(yi, yi + out, 0.0F);
        }
        detail::add_terms(
            x.offsets[i], x.offsets[i + 1], [&](offset_t e) { return x.values[e]; },
            [&](offset_t e) { return w + static_cast<std::ptrdiff_t>(x.indices[e]) * out; }, out, yi);
    }
}

void sparse_linear_backward_weights(const csr_matrix& x, const float* dy, int out, float* dw)
{
    check_finite("sparse_linear::backward", "dy", dy, static_cast<std::size_t>(x.rows) * out);
    // Both give every element of dw the chain of the plain loop `for i: for e in row i:
    // dw[j] += x_ie * dy[i]` (rows ascending), whatever the thread count: the same bits.
    constexpr std::int64_t dy_in_place = std::int64_t{4} << 20; // bytes; by columns faster below
    if (x.rows * out * static_cast<std::int64_t>(sizeof(float)) <= dy_in_place)
        weight_gradient_by_columns(x, dy, out, dw);
    else
        weight_gradient_by_blocks(x, dy, out, dw);
}

namespace exact {

void sparse_gemm_tn(const csr_matrix& x, const float* d, int b, int k, std::int64_t* acc)
{
    const double scale = std::ldexp(1.0, k);
    by_column_ranges(x, b, [&](std::int64_t i, offset_t e) {
        const float v = x.values[e];
        if (v == 0.0F) return;
        const double xs = static_cast<double>(v) * scale;
        const float* dr = d + i * b;
        std::int64_t* out = acc + static_cast<std::ptrdiff_t>(x.indices[e]) * b;
#pragma omp simd
        for (int m = 0; m < b; ++m)
            out[m] += static_cast<std::int64_t>(xs * static_cast<double>(dr[m]));
    });
}

} // namespace exact

void dropout_forward(const csr_matrix& x, std::span<const node_t> row_ids, double p, const dropout_key& key,
                     csr_matrix& y, std::int64_t col0, std::int64_t mask_width)
{
    RETEXO_ENSURE(static_cast<std::int64_t>(row_ids.size()) == x.rows,
                  "retexo::dropout_forward: " << row_ids.size() << " row ids for " << x.rows << " sparse rows");
    if (&y != &x) {
        y.rows = x.rows;
        y.cols = x.cols;
        y.offsets = x.offsets;
        y.indices = x.indices;
        y.values.resize(x.values.size());
    }
    if (p <= 0) {
        if (&y != &x) std::copy(x.values.begin(), x.values.end(), y.values.begin());
        return;
    }
    // The dense kernel's mask: 16 bits per column, four columns per counter.
    const auto rng = key.rng();
    const auto threshold = static_cast<std::uint64_t>(p * 65536.0);
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    const std::uint64_t groups = (static_cast<std::uint64_t>(std::max(col0 + x.cols, mask_width)) + 3) / 4;
#pragma omp parallel for schedule(static) if (worth_threads(static_cast <std::int64_t>(x.values.size()) * 4))
    for (std::int64_t i = 0; i < x.rows; ++i) {
        const std::uint64_t base = static_cast<std::uint64_t>(row_ids[static_cast<std::size_t>(i)]) * groups;
        std::uint64_t group = ~std::uint64_t{0}, bits = 0; // neighbouring columns share a counter
        for (offset_t e = x.offsets[i]; e < x.offsets[i + 1]; ++e) {
            const auto j = static_cast<std::uint64_t>(col0 + x.indices[e]);
            if (j / 4 != group) {
                group = j / 4;
                bits = rng.bits(base + group);
            }
            y.values[e] = dropout_value(x.values[e], scale, (bits >> (16 * (j % 4))) & 0xFFFFU, threshold);
        }
    }
}

void gather_rows(const matrix_f& x, std::span<const node_t> rows, matrix_f& y)
{
    y.resize(static_cast<Eigen::Index>(rows.size()), x.cols());
    gather_rows(x.data(), rows, static_cast<int>(x.cols()), y.data());
}

void gather_rows(const csr_matrix& x, std::span<const node_t> rows, csr_matrix& y)
{
    y = x.select_rows(rows);
}

void dropout_rows(const matrix_f& x, std::span<const node_t> row_ids, double p, const dropout_key& key, matrix_f& y)
{
    if (&y != &x) y.resize(x.rows(), x.cols());
    dropout_forward(x.data(), row_ids, static_cast<int>(x.cols()), p, key, y.data());
}

void dropout_rows(const csr_matrix& x, std::span<const node_t> row_ids, double p, const dropout_key& key, csr_matrix& y)
{
    dropout_forward(x, row_ids, p, key, y);
}

void dropout_rows(const matrix_f& x, std::span<const node_t> row_ids, double p, const dropout_key& key, csr_matrix& y)
{
    const std::int64_t n = x.rows();
    const auto w = static_cast<int>(x.cols());
    RETEXO_ENSURE(static_cast<std::int64_t>(row_ids.size()) == n,
                  "retexo::dropout_rows: " << row_ids.size() << " row ids for " << n << " rows");
    y.rows = n;
    y.cols = w;
    y.offsets.resize(static_cast<std::size_t>(n) + 1);
    y.offsets[0] = 0;
    // Each thread masks a range of rows, 16 at a time (dropout_forward), and keeps their
    // non-zero entries in its own buffers; then the ranges are copied into y in order.
    std::vector<offset_t> part(static_cast<std::size_t>(omp_get_max_threads()) + 1, 0);
#pragma omp parallel if (worth_threads(n * w * 4))
    {
        const auto t = static_cast<std::size_t>(omp_get_thread_num());
        const std::int64_t threads = omp_get_num_threads();
        const std::int64_t r0 = n * static_cast<std::int64_t>(t) / threads;
        const std::int64_t r1 = n * static_cast<std::int64_t>(t + 1) / threads;
        constexpr std::int64_t block = 16;
        thread_local std::vector<float> masked, values;
        thread_local std::vector<std::int32_t> indices;
        masked.resize(static_cast<std::size_t>(block * w));
        std::size_t used = 0;
        for (std::int64_t b0 = r0; b0 < r1; b0 += block) {
            const std::int64_t m = std::min(block, r1 - b0);
            dropout_forward(x.data() + b0 * w,
                            row_ids.subspan(static_cast<std::size_t>(b0), static_cast<std::size_t>(m)), w, p, key,
                            masked.data());
            for (std::int64_t i = 0; i < m; ++i) {
                if (indices.size() < used + static_cast<std::size_t>(w)) {
                    indices.resize(std::max(used + static_cast<std::size_t>(w), 2 * indices.size()));
                    values.resize(indices.size());
                }
                const float* v = masked.data() + i * w;
                std::int32_t* ji = indices.data() + used;
                float* vi = values.data() + used;
                std::size_t c = 0;
                for (int j = 0; j < w; ++j) { // branch-free: the keep decisions are coin flips
                    ji[c] = j;
                    vi[c] = v[j];
                    c += v[j] != 0.0F ? 1 : 0;
                }
                used += c;
                y.offsets[static_cast<std::size_t>(b0 + i) + 1] = static_cast<offset_t>(used);
            }
        }
        part[t + 1] = static_cast<offset_t>(used);
#pragma omp barrier
#pragma omp single
        {
            std::partial_sum(part.begin(), part.end(), part.begin());
            y.indices.resize(static_cast<std::size_t>(part.back()));
            y.values.resize(y.indices.size());
        }
        const offset_t at = part[t];
        for (std::int64_t i = r0; i < r1; ++i)
            y.offsets[static_cast<std::size_t>(i) + 1] += at;
        std::copy_n(indices.data(), used, y.indices.data() + at);
        std::copy_n(values.data(), used, y.values.data() + at);
    }
}

namespace {
/// f(b, yb, col0) for every block b of x (first column col0) and y's block yb at its place,
/// y's blocks made of the same kinds as x's (y may be x).
template <typename F>
void for_each_block_pair(const column_blocks& x, column_blocks& y, F&& f)
{
    if (&y != &x) y.blocks.resize(x.blocks.size());
    std::size_t i = 0;
    x.for_each([&]<typename X>(const X& b, Eigen::Index col0) {
        auto& out = y.blocks[i++];
        if (!std::holds_alternative<X>(out)) out = X();
        f(b, std::get<X>(out), col0);
    });
}
} // namespace

void gather_rows(const column_blocks& x, std::span<const node_t> rows, column_blocks& y)
{
    for_each_block_pair(x, y, [&](const auto& b, auto& yb, Eigen::Index) { gather_rows(b, rows, yb); });
}

void dropout_rows(const column_blocks& x, std::span<const node_t> row_ids, double p, const dropout_key& key,
                  column_blocks& y)
{
    // The masks of the dense form: each block keyed by its columns there.
    const std::int64_t width = x.cols();
    for_each_block_pair(x, y, [&]<typename X>(const X& b, X& yb, Eigen::Index col0) {
        if constexpr (std::is_same_v<X, matrix_f>) {
            if (&yb != &b) yb.resize(b.rows(), b.cols());
            dropout_forward(b.data(), row_ids, static_cast<int>(b.cols()), p, key, yb.data(), col0, width);
        } else {
            dropout_forward(b, row_ids, p, key, yb, col0, width);
        }
    });
}

namespace {
/// A dense block of gather_dropout_rows: y = the rows of x, masked when p > 0.
struct dense_gather {
    const matrix_f* x;
    matrix_f* y;
    std::optional<dropout_mask<float>> mask;
};
/// Every dense block's rows in one parallel region, each row copied and masked in one pass
/// (the bits of gather_rows, then dropout_rows).
void gather_dropout_dense(std::span<const dense_gather> blocks, std::span<const node_t> rows,
                          std::span<const node_t> row_ids)
{
    const auto n = static_cast<std::int64_t>(rows.size());
    std::int64_t width = 0;
    for (const auto& b : blocks)
        width += b.x->cols();
#pragma omp parallel if (worth_threads(n * width))
    for (const auto& b : blocks) {
        const auto w = b.x->cols();
#pragma omp for schedule(static) nowait
        for (std::int64_t r = 0; r < n; ++r) {
            const float* xr = b.x->data() + static_cast<std::ptrdiff_t>(rows[static_cast<std::size_t>(r)]) * w;
            float* yr = b.y->data() + r * w;
            if (b.mask)
                b.mask->row(xr, row_ids[static_cast<std::size_t>(r)], yr);
            else
                std::copy(xr, xr + w, yr);
        }
    }
}

/// Block x's gather into y (sized for n rows): columns [col0, col0 + x.cols()) of rows
/// `width` wide (0: x's own), masked when p > 0.
dense_gather gather_into(const matrix_f& x, matrix_f& y, std::int64_t n, double p, const dropout_key& key,
                         std::int64_t col0, std::int64_t width)
{
    y.resize(static_cast<Eigen::Index>(n), x.cols());
    return {&x, &y,
            p > 0 ? std::optional(dropout_mask<float>(p, key, col0, static_cast<int>(x.cols()), width)) : std::nullopt};
}
} // namespace

void gather_dropout_rows(const matrix_f& x, std::span<const node_t> rows, std::span<const node_t> row_ids, double p,
                         const dropout_key& key, matrix_f& y)
{
    const dense_gather block = gather_into(x, y, static_cast<std::int64_t>(rows.size()), p, key, 0, 0);
    gather_dropout_dense({&block, 1}, rows, row_ids);
}

void gather_dropout_rows(const csr_matrix& x, std::span<const node_t> rows, std::span<const node_t> row_ids, double p,
                         const dropout_key& key, csr_matrix& y)
{
    gather_rows(x, rows, y);
    dropout_rows(y, row_ids, p, key, y);
}

void gather_dropout_rows(const column_blocks& x, std::span<const node_t> rows, std::span<const node_t> row_ids,
                         double p, const dropout_key& key, column_blocks& y)
{
    // The masks of the dense form: each block keyed by its columns there.
    const std::int64_t width = x.cols();
    std::vector<dense_gather> dense;
    for_each_block_pair(x, y, [&]<typename X>(const X& b, X& yb, Eigen::Index col0) {
        if constexpr (std::is_same_v<X, matrix_f>) {
            dense.push_back(gather_into(b, yb, static_cast<std::int64_t>(rows.size()), p, key, col0, width));
        } else {
            gather_rows(b, rows, yb);
            dropout_forward(yb, row_ids, p, key, yb, col0, width);
        }
    });
    gather_dropout_dense(dense, rows, row_ids);
}

matrix_f top_rows(const matrix_f& x, Eigen::Index n)
{
    return x.topRows(n);
}

csr_matrix top_rows(const csr_matrix& x, Eigen::Index n)
{
    return x.middle_rows(0, n);
}

column_blocks top_rows(const column_blocks& x, Eigen::Index n)
{
    column_blocks out;
    x.for_each([&](const auto& b, Eigen::Index) { out.blocks.emplace_back(top_rows(b, n)); });
    return out;
}

namespace {

/// Per thread: a dense accumulator over the columns and the columns touched, in order.
struct sparse_accumulator {
    std::vector<float> sum;
    std::vector<char> seen;
    std::vector<std::int32_t> touched;
    explicit sparse_accumulator(std::int64_t cols) : sum(static_cast<std::size_t>(cols), 0.0F), seen(sum.size(), 0) {}

    /// Row `out_row` of the aggregation into touched (sorted) and sum (values).
    void gather(const aggregation& plan, const csr_matrix& x, node_t out_row, bool values)
    {
        const auto& edges = plan.edges();
        const auto w = plan.weights();
        touched.clear();
        for (offset_t e = edges.offsets[out_row]; e < edges.offsets[out_row + 1]; ++e) {
            const node_t u = edges.sources[e];
            for (offset_t t = x.offsets[u]; t < x.offsets[u + 1]; ++t) {
                const auto j = static_cast<std::size_t>(x.indices[t]);
                if (seen[j] == 0) {
                    seen[j] = 1;
                    touched.push_back(x.indices[t]);
                }
                if (values) sum[j] += w[e] * x.values[t];
            }
        }
        std::sort(touched.begin(), touched.end());
    }
    void clear()
    {
        for (std::int32_t j : touched) {
            seen[static_cast<std::size_t>(j)] = 0;
            sum[static_cast<std::size_t>(j)] = 0.0F;
        }
    }
};

void check_plan(const aggregation& plan, const csr_matrix& x)
{
    RETEXO_ENSURE(plan.kind() == aggregator::sum || plan.kind() == aggregator::mean || plan.kind() == aggregator::gcn,
                  "retexo::aggregate_sparse: " << name_of(plan.kind())
                                               << " aggregation of sparse rows is not supported");
    RETEXO_ENSURE(x.rows == plan.num_src(),
                  "retexo::aggregate_sparse: " << x.rows << " input rows, the plan reads " << plan.num_src());
}

/// Row nonzero counts of the aggregation (per output row).
std::vector<offset_t> row_counts(const aggregation& plan, const csr_matrix& x)
{
    const node_t n = plan.num_out();
    std::vector<offset_t> count(static_cast<std::size_t>(n) + 1, 0);
#pragma omp parallel
    {
        sparse_accumulator acc(x.cols);
#pragma omp for schedule(dynamic, 256)
        for (node_t i = 0; i < n; ++i) {
            acc.gather(plan, x, i, false);
            count[static_cast<std::size_t>(i) + 1] = static_cast<offset_t>(acc.touched.size());
            acc.clear();
        }
    }
    return count;
}

} // namespace

csr_matrix aggregate_sparse(const aggregation& plan, const csr_matrix& x)
{
    check_plan(plan, x);
    check_finite("aggregate_sparse", "input", x.values.data(), x.values.size());
    const node_t n = plan.num_out();
    csr_matrix out(n, x.cols);
    out.offsets = row_counts(plan, x);
    std::partial_sum(out.offsets.begin(), out.offsets.end(), out.offsets.begin());
    out.indices.resize(static_cast<std::size_t>(out.offsets.back()));
    out.values.resize(out.indices.size());
#pragma omp parallel
    {
        sparse_accumulator acc(x.cols);
#pragma omp for schedule(dynamic, 256)
        for (node_t i = 0; i < n; ++i) {
            acc.gather(plan, x, i, true);
            offset_t t = out.offsets[i];
            for (std::int32_t j : acc.touched) {
                out.indices[t] = j;
                out.values[t++] = acc.sum[static_cast<std::size_t>(j)];
            }
            acc.clear();
        }
    }
    return out;
}

} // namespace retexo
