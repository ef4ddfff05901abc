// CSR matrices of node features: building, slicing, stacking and conversion to dense.
#include <retexo/core/sparse.hpp>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace retexo {

namespace {

/// m(i, col0 + j) = b(i, j) for b's non-zero entries (the other entries of m are left as they are).
void scatter_into(const csr_matrix& b, matrix_f& m, Eigen::Index col0)
{
    for (std::int64_t i = 0; i < b.rows; ++i)
        for (offset_t e = b.offsets[i]; e < b.offsets[i + 1]; ++e)
            m(i, col0 + b.indices[e]) = b.values[e];
}

} // namespace

void csr_matrix::push_row(std::span<const std::int32_t> idx, std::span<const float> val)
{
    indices.insert(indices.end(), idx.begin(), idx.end());
    values.insert(values.end(), val.begin(), val.end());
    offsets.push_back(static_cast<offset_t>(values.size()));
    ++rows;
}

csr_matrix csr_matrix::from_dense(const matrix_f& x)
{
    csr_matrix m(0, x.cols());
    m.offsets.reserve(static_cast<std::size_t>(x.rows()) + 1);
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        for (Eigen::Index j = 0; j < x.cols(); ++j)
            if (x(i, j) != 0.0F) {
                m.indices.push_back(static_cast<std::int32_t>(j));
                m.values.push_back(x(i, j));
            }
        m.offsets.push_back(static_cast<offset_t>(m.values.size()));
    }
    m.rows = x.rows();
    return m;
}

matrix_f csr_matrix::to_dense() const
{
    matrix_f x;
    to_dense(x);
    return x;
}

void csr_matrix::to_dense(matrix_f& x) const
{
    x.setZero(rows, cols);
    scatter_into(*this, x, 0);
}

csr_matrix csr_matrix::select_rows(std::span<const node_t> rows_wanted) const
{
    csr_matrix m(0, cols);
    offset_t total = 0;
    for (node_t r : rows_wanted)
        total += row_nnz(r);
    m.indices.reserve(static_cast<std::size_t>(total));
    m.values.reserve(static_cast<std::size_t>(total));
    m.offsets.reserve(rows_wanted.size() + 1);
    for (node_t r : rows_wanted)
        m.push_row(row_indices(r), row_values(r));
    return m;
}

csr_matrix csr_matrix::middle_rows(std::int64_t begin, std::int64_t end) const
{
    RETEXO_ENSURE(0 <= begin && begin <= end && end <= rows,
                  "retexo::csr_matrix::middle_rows: [" << begin << ", " << end << ") outside [0, " << rows << ")");
    csr_matrix m(end - begin, cols);
    const offset_t e0 = offsets[begin], e1 = offsets[end];
    for (std::int64_t i = begin; i <= end; ++i)
        m.offsets[i - begin] = offsets[i] - e0;
    m.indices.assign(indices.begin() + e0, indices.begin() + e1);
    m.values.assign(values.begin() + e0, values.begin() + e1);
    return m;
}

void csr_matrix::validate(const std::string& what, const std::function<std::string(std::int64_t)>& row_name) const
{
    const auto row = [&](std::int64_t i) { return row_name ? row_name(i) : "row " + std::to_string(i); };
    RETEXO_ENSURE(rows >= 0 && cols >= 0 && cols <= (std::int64_t{1} << 31),
                  what << ": bad shape " << rows << " x " << cols);
    RETEXO_ENSURE(static_cast<std::int64_t>(offsets.size()) == rows + 1,
                  what << ": " << offsets.size() << " row offsets for " << rows << " rows");
    RETEXO_ENSURE(offsets.front() == 0 && offsets.back() == nnz() && indices.size() == values.size(),
                  what << ": row offsets do not match the " << nnz() << " stored entries");
    for (std::int64_t i = 0; i < rows; ++i) {
        RETEXO_ENSURE(offsets[i] <= offsets[i + 1], what << ": row offsets decrease at " << row(i));
        for (offset_t e = offsets[i]; e < offsets[i + 1]; ++e) {
            RETEXO_ENSURE(indices[e] >= 0 && indices[e] < cols,
                          what << ": " << row(i) << " has column " << indices[e] << " outside [0, " << cols << ")");
            RETEXO_ENSURE(e == offsets[i] || indices[e - 1] < indices[e],
                          what << ": " << row(i) << " has columns out of order or repeated");
            RETEXO_ENSURE(std::isfinite(values[e]), what << ": " << row(i) << " has a non-finite value (" << values[e]
                                                         << ") at column " << indices[e]);
        }
    }
}

void csr_matrix::clear_rows(std::span<const node_t> which)
{
    std::vector<char> drop(static_cast<std::size_t>(rows), 0);
    for (node_t r : which)
        if (r >= 0 && r < rows) drop[static_cast<std::size_t>(r)] = 1;
    offset_t out = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
        const offset_t e0 = offsets[i], e1 = offsets[i + 1];
        offsets[i] = out;
        if (drop[static_cast<std::size_t>(i)] != 0) continue;
        for (offset_t e = e0; e < e1; ++e, ++out) {
            indices[out] = indices[e];
            values[out] = values[e];
        }
    }
    offsets[rows] = out;
    indices.resize(static_cast<std::size_t>(out));
    values.resize(static_cast<std::size_t>(out));
}

csr_matrix hstack(const csr_matrix& a, const csr_matrix& b)
{
    RETEXO_ENSURE(a.rows == b.rows, "retexo::hstack: " << a.rows << " rows beside " << b.rows);
    csr_matrix m(0, a.cols + b.cols);
    m.indices.reserve(a.indices.size() + b.indices.size());
    m.values.reserve(a.values.size() + b.values.size());
    m.offsets.reserve(static_cast<std::size_t>(a.rows) + 1);
    for (std::int64_t i = 0; i < a.rows; ++i) {
        m.indices.insert(m.indices.end(), a.row_indices(i).begin(), a.row_indices(i).end());
        m.values.insert(m.values.end(), a.row_values(i).begin(), a.row_values(i).end());
        for (std::int32_t j : b.row_indices(i))
            m.indices.push_back(static_cast<std::int32_t>(j + a.cols));
        m.values.insert(m.values.end(), b.row_values(i).begin(), b.row_values(i).end());
        m.offsets.push_back(static_cast<offset_t>(m.values.size()));
    }
    m.rows = a.rows;
    return m;
}

const matrix_f& node_features::dense() const
{
    return as<matrix_f>();
}

matrix_f& node_features::dense()
{
    return const_cast<matrix_f&>(as<matrix_f>()); // NOLINT(cppcoreguidelines-pro-type-const-cast): one check
}

const csr_matrix& node_features::sparse() const
{
    return as<csr_matrix>();
}

csr_matrix& node_features::sparse()
{
    return const_cast<csr_matrix&>(as<csr_matrix>()); // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

namespace {

/// The same shape and values (Eigen's == needs equal shapes).
bool same_values(const matrix_f& x, const matrix_f& y)
{
    return x.rows() == y.rows() && x.cols() == y.cols() && x == y;
}
bool same_values(const csr_matrix& x, const csr_matrix& y)
{
    return x == y;
}
bool same_values(const column_blocks& x, const column_blocks& y)
{
    return x == y;
}

matrix_f dense_rows_of(const matrix_f& d, std::span<const node_t> rows)
{
    matrix_f out(static_cast<Eigen::Index>(rows.size()), d.cols());
    for (std::size_t i = 0; i < rows.size(); ++i)
        out.row(static_cast<Eigen::Index>(i)) = d.row(rows[i]);
    return out;
}

/// x's blocks (consumed), one for dense or sparse x.
std::vector<column_blocks::block> blocks_of(node_features&& x)
{
    if (x.is_blocks()) return std::move(x.storage<column_blocks>().blocks);
    // Not {std::move(...)}: a vector copies an initializer list's elements.
    std::vector<column_blocks::block> one;
    if (x.is_sparse())
        one.emplace_back(std::move(x.sparse()));
    else
        one.emplace_back(std::move(x.dense()));
    return one;
}

/// b appended to the blocks; sparse rows join sparse rows before them (one pass of the
/// sparse kernels), dense blocks stay apart (no copy: each is its own GEMM).
void append_block(std::vector<column_blocks::block>& blocks, column_blocks::block&& b)
{
    if (std::visit([](const auto& x) { return cols_of(x); }, b) == 0) return;
    auto* last = blocks.empty() ? nullptr : std::get_if<csr_matrix>(&blocks.back());
    if (last != nullptr && std::holds_alternative<csr_matrix>(b))
        *last = hstack(*last, std::get<csr_matrix>(b));
    else
        blocks.push_back(std::move(b));
}

} // namespace

Eigen::Index column_blocks::rows() const noexcept
{
    return blocks.empty() ? 0 : std::visit([](const auto& x) { return rows_of(x); }, blocks.front());
}

Eigen::Index column_blocks::cols() const noexcept
{
    Eigen::Index c = 0;
    for_each([&](const auto& x, Eigen::Index) { c += cols_of(x); });
    return c;
}

bool column_blocks::operator==(const column_blocks& o) const
{
    if (blocks.size() != o.blocks.size()) return false;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].index() != o.blocks[i].index()) return false;
        if (!std::visit([&]<typename X>(const X& x) { return same_values(x, std::get<X>(o.blocks[i])); }, blocks[i]))
            return false;
    }
    return true;
}

matrix_f column_blocks::to_dense() const
{
    matrix_f m;
    to_dense(m);
    return m;
}

void column_blocks::to_dense(matrix_f& m) const
{
    m.resize(rows(), cols());
    for_each([&]<typename X>(const X& b, Eigen::Index col0) {
        if constexpr (std::is_same_v<X, matrix_f>) {
            m.middleCols(col0, b.cols()) = b;
        } else {
            m.middleCols(col0, cols_of(b)).setZero();
            scatter_into(b, m, col0);
        }
    });
}

matrix_f node_features::to_dense() const
{
    return visit([]<typename X>(const X& x) -> matrix_f {
        if constexpr (std::is_same_v<X, matrix_f>)
            return x;
        else
            return x.to_dense();
    });
}

node_features node_features::select_rows(std::span<const node_t> rows) const
{
    std::vector<column_blocks::block> out;
    for_each_block([&]<typename X>(const X& b, Eigen::Index) {
        if constexpr (std::is_same_v<X, matrix_f>)
            out.emplace_back(dense_rows_of(b, rows));
        else
            out.emplace_back(b.select_rows(rows));
    });
    return from_blocks(std::move(out));
}

bool operator==(const node_features& a, const node_features& b)
{
    if (std::string_view(a.storage_name()) != b.storage_name()) return false;
    return a.visit([&]<typename X>(const X& x) { return same_values(x, b.as<X>()); });
}

node_features beside(node_features a, node_features b)
{
    RETEXO_ENSURE(a.rows() == b.rows(), "retexo::beside: " << a.rows() << " rows beside " << b.rows());
    const Eigen::Index n = a.rows();
    std::vector<column_blocks::block> blocks;
    for (auto* x : {&a, &b})
        for (auto& block : blocks_of(std::move(*x)))
            append_block(blocks, std::move(block));
    if (blocks.empty()) return matrix_f(n, 0);
    return from_blocks(std::move(blocks));
}

node_features from_blocks(std::vector<column_blocks::block> blocks)
{
    if (blocks.size() == 1) return std::visit([](auto& x) { return node_features(std::move(x)); }, blocks.front());
    return column_blocks{std::move(blocks)};
}

node_features vstack(std::span<const node_features> blocks, std::int64_t cols, bool sparse)
{
    std::int64_t rows = 0;
    for (const auto& b : blocks) {
        RETEXO_ENSURE(b.cols() == cols, "retexo::vstack: a block of " << b.cols() << " columns, expected " << cols);
        rows += b.rows();
    }
    if (sparse) {
        csr_matrix m(0, cols);
        m.offsets.reserve(static_cast<std::size_t>(rows) + 1);
        for (const auto& b : blocks) {
            const csr_matrix converted = b.is_sparse() ? csr_matrix() : csr_matrix::from_dense(b.dense());
            const csr_matrix& s = b.is_sparse() ? b.sparse() : converted;
            for (std::int64_t i = 0; i < s.rows; ++i)
                m.push_row(s.row_indices(i), s.row_values(i));
        }
        return m;
    }
    matrix_f m(rows, cols);
    Eigen::Index r = 0;
    for (const auto& b : blocks) {
        m.middleRows(r, b.rows()) = b.to_dense();
        r += b.rows();
    }
    return m;
}

} // namespace retexo
