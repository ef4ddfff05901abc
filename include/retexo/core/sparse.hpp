#pragma once
/// @file sparse.hpp
/// Sparse rows: a float matrix in compressed sparse row form (bag-of-words node features and
/// their aggregates are 0.3-5% non-zero), and node features that are dense, sparse, or dense
/// columns beside sparse ones (a RETEXO stage's embeddings beside the raw features).

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <functional>
#include <span>
#include <string>
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
    void to_dense(matrix_f& x) const; ///< into x's storage where it has the size already
    /// The given rows, in order.
    csr_matrix select_rows(std::span<const node_t> rows) const;
    /// Rows [begin, end).
    csr_matrix middle_rows(std::int64_t begin, std::int64_t end) const;
    /// Check the structure (and that every value is finite); throws naming `what` and the
    /// row, as row_name(its index) gives it (a block read from a file names the file's node;
    /// default: "row i").
    void validate(const std::string& what, const std::function<std::string(std::int64_t)>& row_name = {}) const;
    /// Remove every entry of the listed rows (they become zero rows).
    void clear_rows(std::span<const node_t> which);

    bool operator==(const csr_matrix&) const = default;
};

/// Rows are kept sparse below this density: above it the dense kernels (oneDNN GEMM,
/// vectorised aggregation) do the same work faster.  perf/bench_kernels ("sparse linear",
/// x dense) finds the sparse product and weight gradient 2.5x faster than the dense ones at
/// 18% and 1.7x at 26% on an AVX2 core; 25% leaves a margin for CPUs whose GEMM is faster.
inline constexpr double sparse_density_limit = 0.25;

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

/// Rows stored as column blocks, each dense or sparse rows, in column order ([b0 | b1 | ...]):
/// each block is multiplied in its own kernel (oneDNN GEMM, sparse rows), so dense columns
/// are never stored as sparse entries nor sparse ones as dense.  A RETEXO stage's input:
/// its embeddings beside the raw (sparse) features.
struct column_blocks {
    using block = std::variant<matrix_f, csr_matrix>;
    std::vector<block> blocks; ///< each with every row and at least one column

    Eigen::Index rows() const noexcept;
    Eigen::Index cols() const noexcept;
    /// f(b, col0) for every block b (matrix_f or csr_matrix) and its first column.
    template <typename F>
    void for_each(F&& f) const
    {
        Eigen::Index col0 = 0;
        for (const auto& b : blocks)
            std::visit(
                [&](const auto& x) {
                    f(x, col0);
                    col0 += cols_of(x);
                },
                b);
    }
    bool operator==(const column_blocks& o) const;
    matrix_f to_dense() const;
    void to_dense(matrix_f& m) const; ///< into m's storage where it has the size already
};
inline Eigen::Index rows_of(const column_blocks& x) noexcept
{
    return x.rows();
}
inline Eigen::Index cols_of(const column_blocks& x) noexcept
{
    return x.cols();
}

/// Node features, one row per node: dense, sparse rows where few entries are non-zero, or
/// column blocks of either kind side by side.
class node_features {
public:
    node_features() = default;
    node_features(matrix_f dense) : v_(std::move(dense)) {} // NOLINT(google-explicit-constructor): features are data
    node_features(csr_matrix sparse) : v_(std::move(sparse)) {}    // NOLINT(google-explicit-constructor)
    node_features(column_blocks blocks) : v_(std::move(blocks)) {} // NOLINT(google-explicit-constructor)

    bool is_sparse() const noexcept { return std::holds_alternative<csr_matrix>(v_); }
    bool is_blocks() const noexcept { return std::holds_alternative<column_blocks>(v_); }
    Eigen::Index rows() const noexcept
    {
        return std::visit([](const auto& x) { return rows_of(x); }, v_);
    }
    Eigen::Index cols() const noexcept
    {
        return std::visit([](const auto& x) { return cols_of(x); }, v_);
    }
    /// f(x) with x the dense matrix, the sparse rows or the column blocks.
    template <typename F>
    decltype(auto) visit(F&& f) const
    {
        return std::visit(std::forward<F>(f), v_);
    }
    /// f(b, col0) for every column block b (matrix_f or csr_matrix) and its first column:
    /// dense and sparse features are one block.
    template <typename F>
    void for_each_block(F&& f) const
    {
        if (const auto* blocks = std::get_if<column_blocks>(&v_))
            blocks->for_each(f);
        else
            std::visit(
                [&]<typename X>(const X& x) {
                    if constexpr (!std::is_same_v<X, column_blocks>) f(x, Eigen::Index{0});
                },
                v_);
    }
    /// The dense rows (throws if sparse).
    const matrix_f& dense() const;
    matrix_f& dense();
    /// The sparse rows (throws if not sparse).
    const csr_matrix& sparse() const;
    csr_matrix& sparse();
    /// The storage as X (matrix_f, csr_matrix or column_blocks), throwing if it holds another.
    template <typename X>
    const X& as() const
    {
        const X* x = std::get_if<X>(&v_);
        RETEXO_ENSURE(x != nullptr, "retexo::node_features: the features are stored " << storage_name() << ", not as "
                                                                                      << storage_name(X{}));
        return *x;
    }
    /// The storage as X, an empty X first if it holds another: a buffer that keeps its
    /// storage from one use to the next.
    template <typename X>
    X& storage()
    {
        if (!std::holds_alternative<X>(v_)) v_ = X();
        return std::get<X>(v_);
    }
    /// Dense rows whatever the storage.
    matrix_f to_dense() const;
    /// "dense", "sparse" or "blocks".
    const char* storage_name() const noexcept
    {
        return visit([](const auto& x) { return storage_name(x); });
    }
    /// The given rows, stored as these are.
    node_features select_rows(std::span<const node_t> rows) const;

private:
    static const char* storage_name(const matrix_f&) noexcept { return "dense"; }
    static const char* storage_name(const csr_matrix&) noexcept { return "sparse"; }
    static const char* storage_name(const column_blocks&) noexcept { return "blocks"; }
    std::variant<matrix_f, csr_matrix, column_blocks> v_;
};

/// The same storage and the same values.
bool operator==(const node_features& a, const node_features& b);

/// The blocks side by side: the block itself when there is one, else column blocks.
node_features from_blocks(std::vector<column_blocks::block> blocks);

/// [a | b], each block in its storage, without copying a dense block: column blocks, or
/// sparse rows when every block is sparse (neighbouring sparse blocks are joined).
/// Consumes a and b.
node_features beside(node_features a, node_features b);

/// The rows of the blocks one after the other (cols columns), stored sparse or dense.
node_features vstack(std::span<const node_features> blocks, std::int64_t cols, bool sparse);

} // namespace retexo
