#pragma once
/// @file sparse.hpp
/// Sparse rows: a float matrix in compressed sparse row form (bag-of-words node features and
/// their aggregates are 0.3-5% non-zero), and node features that are dense or sparse.

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <span>
#include <variant>
#include <vector>

namespace retexo {

/// Row i holds columns indices[offsets[i] .. offsets[i+1]) (ascending, distinct) with their
/// values; every other entry is zero.
struct csr_matrix {
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    std::vector<offset_t> offsets{0}; ///< rows + 1 entries
    std::vector<std::int32_t> indices;
    std::vector<float> values;

    csr_matrix() = default;
    /// An empty matrix of this shape (every row without entries).
    csr_matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), offsets(static_cast<std::size_t>(r) + 1, 0) {}

    offset_t nnz() const noexcept { return static_cast<offset_t>(values.size()); }
    double density() const noexcept
    {
        return rows * cols > 0 ? static_cast<double>(nnz()) / (static_cast<double>(rows) * static_cast<double>(cols))
                               : 0.0;
    }
    offset_t row_nnz(std::int64_t i) const noexcept { return offsets[i + 1] - offsets[i]; }
    std::span<const std::int32_t> row_indices(std::int64_t i) const noexcept
    {
        return {indices.data() + offsets[i], static_cast<std::size_t>(row_nnz(i))};
    }
    std::span<const float> row_values(std::int64_t i) const noexcept
    {
        return {values.data() + offsets[i], static_cast<std::size_t>(row_nnz(i))};
    }
    /// Append a row (indices ascending).
    void push_row(std::span<const std::int32_t> idx, std::span<const float> val);

    /// The non-zero entries of x.
    static csr_matrix from_dense(const matrix_f& x);
    matrix_f to_dense() const;
    /// The given rows, in order.
    csr_matrix select_rows(std::span<const node_t> rows) const;
    /// Rows [begin, end).
    csr_matrix middle_rows(std::int64_t begin, std::int64_t end) const;
    /// Check the structure; throws naming `what`.
    void validate(const std::string& what) const;
    /// Remove every entry of the listed rows (they become zero rows).
    void clear_rows(std::span<const node_t> which);

    bool operator==(const csr_matrix&) const = default;
};

/// Rows are kept sparse below this density: above it the dense kernels (oneDNN GEMM,
/// vectorised aggregation) do the same work faster (perf/bench_kernels, "sparse").
inline constexpr double sparse_density_limit = 0.1;

/// Shapes of dense and sparse row sets alike.
template <typename T>
Eigen::Index rows_of(const matrix<T>& x) noexcept
{
    return x.rows();
}
inline Eigen::Index rows_of(const csr_matrix& x) noexcept
{
    return static_cast<Eigen::Index>(x.rows);
}
template <typename T>
Eigen::Index cols_of(const matrix<T>& x) noexcept
{
    return x.cols();
}
inline Eigen::Index cols_of(const csr_matrix& x) noexcept
{
    return static_cast<Eigen::Index>(x.cols);
}

/// [a | b]: the columns of b after those of a (same row count).
csr_matrix hstack(const csr_matrix& a, const csr_matrix& b);
/// [a | b] with a's non-zeros as sparse entries, consuming b: no sparse copy of a on the
/// way, and each of b's arrays freed as soon as it is read (b is left empty).
csr_matrix hstack(const matrix_f& a, csr_matrix&& b);

/// Node features, one row per node: dense, or sparse rows where few entries are non-zero.
class node_features {
public:
    node_features() = default;
    node_features(matrix_f dense) : v_(std::move(dense)) {} // NOLINT(google-explicit-constructor): features are data
    node_features(csr_matrix sparse) : v_(std::move(sparse)) {} // NOLINT(google-explicit-constructor)

    bool is_sparse() const noexcept { return std::holds_alternative<csr_matrix>(v_); }
    Eigen::Index rows() const noexcept
    {
        return std::visit([](const auto& x) { return rows_of(x); }, v_);
    }
    Eigen::Index cols() const noexcept
    {
        return std::visit([](const auto& x) { return cols_of(x); }, v_);
    }
    /// f(x) with x the dense matrix or the sparse rows.
    template <typename F>
    decltype(auto) visit(F&& f) const
    {
        return std::visit(std::forward<F>(f), v_);
    }
    /// The dense rows (throws if sparse).
    const matrix_f& dense() const;
    matrix_f& dense();
    /// The sparse rows (throws if dense).
    const csr_matrix& sparse() const;
    csr_matrix& sparse();
    /// The storage as X (matrix_f or csr_matrix), an empty X first if it holds the other:
    /// a buffer that keeps its storage from one use to the next.
    template <typename X>
    X& storage()
    {
        if (!std::holds_alternative<X>(v_)) v_ = X();
        return std::get<X>(v_);
    }
    /// Dense rows whatever the storage.
    matrix_f to_dense() const { return is_sparse() ? sparse().to_dense() : dense(); }
    /// The given rows, stored as these are.
    node_features select_rows(std::span<const node_t> rows) const;

private:
    std::variant<matrix_f, csr_matrix> v_;
};

/// The same storage and the same values.
bool operator==(const node_features& a, const node_features& b);

/// The rows of the blocks one after the other (cols columns), stored sparse or dense.
node_features vstack(std::span<const node_features> blocks, std::int64_t cols, bool sparse);

} // namespace retexo
