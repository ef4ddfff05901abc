#pragma once
/// @file linear.hpp
/// Dense Y = X W + b and its backward pass.  float goes through oneDNN matmul primitives,
/// created once per shape and cached; double goes through Eigen (gradient checks).
///
/// Determinism: the output is cut into tiles that depend only on the shape: blocks of rows
/// (forward, backward-data), and of 64 output columns when there are fewer than four row
/// blocks (a few hundred rows still use every core).  Every oneDNN call has a whole number
/// of the GEMM kernel's row groups (24 rows with AVX2, else 48; the last rows in a call of
/// one group that ends with them), so a row's output does not depend on how many rows come
/// with it: a rank's rows get the bits they get in one process.  The weight gradient X^T dY
/// is summed over a fixed number of row chunks that depends only on the row count, each
/// chunk's product in blocks of 64 of dW's rows when there are fewer than four chunks.  Each
/// tile runs single-threaded inside one OpenMP parallel loop.  Results are therefore
/// bit-identical for any thread count.

#include <retexo/kernels/common.hpp>
#include <retexo/kernels/sparse.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace retexo {

class linear_kernel {
public:
    /// W is in x out (row-major), b has out entries.
    linear_kernel(int in, int out);
    ~linear_kernel();
    linear_kernel(linear_kernel&&) noexcept;
    linear_kernel& operator=(linear_kernel&&) noexcept;

    int in() const noexcept { return in_; }
    int out() const noexcept { return out_; }

    /// y (n x out) = x (n x in) W + b; b may be null.
    template <typename T>
    void forward(const T* x, std::int64_t n, const T* w, const T* b, T* y) const;
    /// dx (n x in) = dy (n x out) W^T.
    template <typename T>
    void backward_data(const T* dy, std::int64_t n, const T* w, T* dx) const;
    /// dw (in x out) = x^T dy, db (out) = column sums of dy (db may be null); overwritten,
    /// or added to when accumulate is set.
    template <typename T>
    void backward_weights(const T* x, const T* dy, std::int64_t n, T* dw, T* db, bool accumulate = false) const;

    /// Eigen forms: check every dimension (naming the argument), resize outputs, then call
    /// the pointer forms.  b may be empty (no bias).
    template <typename T>
    void forward(const matrix<T>& x, const matrix<T>& w, const matrix<T>& b, matrix<T>& y) const
    {
        check_shapes("linear::forward", x.cols(), w, b);
        y.resize(x.rows(), out_);
        forward(x.data(), x.rows(), w.data(), b.size() > 0 ? b.data() : nullptr, y.data());
    }
    /// y = x W + b for sparse rows x (kernels/sparse.hpp); b may be empty.
    void forward(const csr_matrix& x, const matrix_f& w, const matrix_f& b, matrix_f& y) const
    {
        check_shapes("linear::forward", static_cast<Eigen::Index>(x.cols), w, b);
        y.resize(static_cast<Eigen::Index>(x.rows), out_);
        sparse_linear_forward(x, w.data(), out_, b.size() > 0 ? b.data() : nullptr, y.data());
    }
    /// dw (in x out) = x^T dy for sparse rows x; overwritten.
    void backward_weights(const csr_matrix& x, const float* dy, float* dw) const
    {
        RETEXO_ENSURE_DIMS("linear::backward", "x columns", static_cast<Eigen::Index>(x.cols), Eigen::Index{in_});
        sparse_linear_backward_weights(x, dy, out_, dw);
    }
    /// y = x W + b for column blocks x: each block times its rows of W in its own kernel
    /// (oneDNN, sparse), the terms summed in block order; b may be empty.
    void forward(const column_blocks& x, const matrix_f& w, const matrix_f& b, matrix_f& y) const;
    /// dw = x^T dy for column blocks x, each block's rows of dw from its own kernel; overwritten.
    void backward_weights(const column_blocks& x, const float* dy, float* dw) const;
    template <typename T>
    void backward(const matrix<T>& x, const matrix<T>& dy, const matrix<T>& w, matrix<T>* dx, matrix<T>& dw,
                  matrix<T>* db, bool accumulate = false) const
    {
        check_shapes("linear::backward", x.cols(), w, matrix<T>());
        RETEXO_ENSURE_DIMS("linear::backward", "dy rows", dy.rows(), x.rows());
        RETEXO_ENSURE_DIMS("linear::backward", "dy columns", dy.cols(), Eigen::Index{out_});
        if (!accumulate || dw.size() == 0) {
            dw.resize(in_, out_);
            if (db != nullptr) db->resize(1, out_);
        }
        backward_weights(x.data(), dy.data(), x.rows(), dw.data(), db != nullptr ? db->data() : nullptr, accumulate);
        if (dx != nullptr) {
            dx->resize(x.rows(), in_);
            backward_data(dy.data(), dy.rows(), w.data(), dx->data());
        }
    }

private:
    template <typename T>
    void check_shapes(const char* op, Eigen::Index x_cols, const matrix<T>& w, const matrix<T>& b) const
    {
        RETEXO_ENSURE_DIMS(op, "x columns", x_cols, Eigen::Index{in_});
        RETEXO_ENSURE(w.rows() == in_ && w.cols() == out_, "retexo::" << op << ": weight is " << w.rows() << " x "
                                                                      << w.cols() << ", expected " << in_ << " x "
                                                                      << out_);
        RETEXO_ENSURE(b.size() == 0 || b.size() == out_,
                      "retexo::" << op << ": bias has " << b.size() << " entries, expected " << out_);
    }
    struct impl;
    int in_, out_;
    std::unique_ptr<impl> impl_;
};

template <>
void linear_kernel::forward<float>(const float*, std::int64_t, const float*, const float*, float*) const;
template <>
void linear_kernel::forward<double>(const double*, std::int64_t, const double*, const double*, double*) const;
template <>
void linear_kernel::backward_data<float>(const float*, std::int64_t, const float*, float*) const;
template <>
void linear_kernel::backward_data<double>(const double*, std::int64_t, const double*, double*) const;
template <>
void linear_kernel::backward_weights<float>(const float*, const float*, std::int64_t, float*, float*, bool) const;
template <>
void linear_kernel::backward_weights<double>(const double*, const double*, std::int64_t, double*, double*, bool) const;

/// Sequential double-precision versions (test oracles).
namespace reference {
template <typename T>
void linear_forward(const T* x, std::int64_t n, int in, int out, const T* w, const T* b, T* y);
template <typename T>
void linear_backward(const T* x, const T* dy, std::int64_t n, int in, int out, const T* w, T* dx, T* dw, T* db);
} // namespace reference

/// Peak of oneDNN's f32 matmul on this machine for an m x k x n product, in GFLOP/s,
/// measured with all threads (used by perf/ to report ratios).
double measure_sgemm_gflops(int m, int k, int n, int repeats);

} // namespace retexo
