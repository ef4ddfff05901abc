#pragma once
/// @file sparse.hpp
/// Kernels over sparse rows (csr_matrix): the linear map of sparse inputs and its weight
/// gradient, dropout of the stored values, and neighbour aggregation of sparse rows into
/// sparse rows.  Each matches its dense counterpart on the dense form of the input: dropout
/// and aggregation bit for bit, the products to rounding (another summation order); the
/// exact (fixed-point) weight gradient bit for bit, as zeros add nothing.  Results do not
/// depend on the thread count.

#include <retexo/core/sparse.hpp>
#include <retexo/kernels/aggregate.hpp>
#include <retexo/kernels/dense.hpp>

namespace retexo {

/// y (x.rows x out) = x w (+ b as a row); w row-major (x.cols x out), b null or out values.
/// accumulate: y += x w (+ b).  Each row of y sums its terms in the order of x's entries.
void sparse_linear_forward(const csr_matrix& x, const float* w, int out, const float* b, float* y,
                           bool accumulate = false);

/// dw (x.cols x out) = x^T dy, dy row-major (x.rows x out); overwritten.  Each row of dw
/// sums its terms in the order of x's rows.
void sparse_linear_backward_weights(const csr_matrix& x, const float* dy, int out, float* dw);

namespace exact {
/// acc (x.cols x b) += x^T d in fixed point with scale 2^k (gemm_tn of the dense form).
void sparse_gemm_tn(const csr_matrix& x, const float* d, int b, int k, std::int64_t* acc);
} // namespace exact

/// y = dropout(x): the stored values of row i (global id row_ids[i]) masked and scaled as
/// dropout_forward masks the dense row; y keeps x's structure (dropped values are zero).
/// x may be the columns from col0 of rows mask_width wide, masked as those rows are (0: x.cols).
void dropout_forward(const csr_matrix& x, std::span<const node_t> row_ids, double p, const dropout_key& key,
                     csr_matrix& y, std::int64_t col0 = 0, std::int64_t mask_width = 0);

/// Row selection and dropout alike for dense, sparse and column-block rows: y = the given
/// rows of x; y = dropout(x) with rows keyed by global ids (column blocks masked as their
/// dense form); the first n rows.
void gather_rows(const matrix_f& x, std::span<const node_t> rows, matrix_f& y);
void gather_rows(const csr_matrix& x, std::span<const node_t> rows, csr_matrix& y);
void dropout_rows(const matrix_f& x, std::span<const node_t> row_ids, double p, const dropout_key& key, matrix_f& y);
void dropout_rows(const csr_matrix& x, std::span<const node_t> row_ids, double p, const dropout_key& key,
                  csr_matrix& y);
/// y = dropout(x) of dense rows, stored sparse: the non-zero values the dense dropout_rows
/// leaves (the same masks), for inputs that dropout makes sparse enough to multiply as rows.
void dropout_rows(const matrix_f& x, std::span<const node_t> row_ids, double p, const dropout_key& key, csr_matrix& y);
void gather_rows(const column_blocks& x, std::span<const node_t> rows, column_blocks& y);
void dropout_rows(const column_blocks& x, std::span<const node_t> row_ids, double p, const dropout_key& key,
                  column_blocks& y);
/// y = dropout(the given rows of x), row i keyed by row_ids[i]: the bits of gather_rows then
/// dropout_rows, the dense rows in one pass and one parallel region.
void gather_dropout_rows(const matrix_f& x, std::span<const node_t> rows, std::span<const node_t> row_ids, double p,
                         const dropout_key& key, matrix_f& y);
void gather_dropout_rows(const csr_matrix& x, std::span<const node_t> rows, std::span<const node_t> row_ids, double p,
                         const dropout_key& key, csr_matrix& y);
void gather_dropout_rows(const column_blocks& x, std::span<const node_t> rows, std::span<const node_t> row_ids,
                         double p, const dropout_key& key, column_blocks& y);
matrix_f top_rows(const matrix_f& x, Eigen::Index n);
csr_matrix top_rows(const csr_matrix& x, Eigen::Index n);
column_blocks top_rows(const column_blocks& x, Eigen::Index n);

/// The aggregation of sparse rows: output row i = sum over the plan's edges e of row i of
/// weight_e * x[source_e] (x: plan.num_src() rows), as sparse rows with ascending columns.
/// Sum and mean plans only.
csr_matrix aggregate_sparse(const aggregation& plan, const csr_matrix& x);

} // namespace retexo
