#pragma once
/// @file reduce.hpp
/// How layers form sums over nodes (weight gradients, message gradients, losses): "fast"
/// float sums in fixed blocks, or "exact" 64-bit fixed point whose result does not depend
/// on how nodes are split over ranks (exact.hpp).  Layers know nothing of MPI: a trainer
/// hands them a global-maximum function with which every rank picks the same fixed-point
/// scale.  Every rank must make the same sequence of calls (the function is collective).

#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/linear.hpp>
#include <retexo/kernels/optim.hpp>

#include <functional>
#include <span>

namespace retexo::nn {

struct reduce_mode {
    bool exact = false;
    /// In-place maximum over all ranks (collective); identity in a single process.
    std::function<void(std::span<double>)> global_max = [](std::span<double>) {};
    /// Upper bound on the number of terms of any cross-node sum, over the whole job (e.g.
    /// nodes + edges + 1 of the whole graph); scales fixed point so nothing overflows.
    double global_terms = 1;

    /// Fixed-point exponent for sums of at most global_terms terms each bounded by the
    /// product of the global maxima of the given local maxima (collective).
    int scale_for(std::initializer_list<double> local_max) const;
};

/// p.grad (or p.exact) = X^T D over n rows (X: n x p.rows(), D: n x p.cols()).
template <typename T>
void weight_gradient(parameter<T>& p, const linear_kernel& k, const T* x, const T* d, std::int64_t n,
                     const reduce_mode& mode);
/// The same for sparse rows X (n = x.rows).
void weight_gradient(parameter<float>& p, const linear_kernel& k, const csr_matrix& x, const float* d,
                     const reduce_mode& mode);
/// The same for column blocks X (exact: the fixed-point sums of their dense form).
void weight_gradient(parameter<float>& p, const linear_kernel& k, const column_blocks& x, const float* d,
                     const reduce_mode& mode);
/// Either form, for X dense or sparse.
template <typename T>
void weight_gradient(parameter<T>& p, const linear_kernel& k, const matrix<T>& x, const T* d, const reduce_mode& mode)
{
    weight_gradient(p, k, x.data(), d, x.rows(), mode);
}
/// p.grad (or p.exact) = column sums of D (n x p.size()).
template <typename T>
void bias_gradient(parameter<T>& p, const T* d, std::int64_t n, const reduce_mode& mode);

/// After a cross-rank sum of p.exact (when exact), turn it into p.grad.
template <typename T>
void finish_exact_gradient(parameter<T>& p);

} // namespace retexo::nn
