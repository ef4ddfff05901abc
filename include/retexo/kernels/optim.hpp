#pragma once
/// @file optim.hpp
/// Parameters, initialisation and optimisers (Adam, AdamW, SGD with momentum).  Updates
/// are elementwise, so they are deterministic given the gradients.

#include <retexo/core/names.hpp>
#include <retexo/core/rng.hpp>
#include <retexo/kernels/common.hpp>

#include <string>
#include <vector>

namespace retexo {

/// A trainable tensor with its gradient (and, in exact mode, the gradient in fixed point).
template <typename T>
struct parameter {
    std::string name;
    matrix<T> value;
    matrix<T> grad;
    std::vector<std::int64_t> exact; ///< fixed-point gradient (exact mode), value.size() entries
    int exact_k = 0;                 ///< scale exponent of `exact`

    parameter() = default;
    parameter(std::string n, Eigen::Index rows, Eigen::Index cols)
        : name(std::move(n)), value(matrix<T>::Zero(rows, cols)), grad(matrix<T>::Zero(rows, cols))
    {
    }
    Eigen::Index size() const noexcept { return value.size(); }
    void zero_grad()
    {
        grad.setZero();
        std::fill(exact.begin(), exact.end(), 0);
    }
};

/// Glorot/Xavier uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
template <typename T>
void xavier_uniform(matrix<T>& w, int fan_in, int fan_out, const counter_rng& rng, double gain = 1.0)
{
    const double a = gain * std::sqrt(6.0 / (fan_in + fan_out));
    for (Eigen::Index i = 0; i < w.size(); ++i)
        w.data()[i] = static_cast<T>((2.0 * rng.uniform_double(static_cast<std::uint64_t>(i)) - 1.0) * a);
}

/// He/Kaiming uniform for ReLU: U(-a, a), a = sqrt(6 / fan_in).
template <typename T>
void kaiming_uniform(matrix<T>& w, int fan_in, const counter_rng& rng)
{
    const double a = std::sqrt(6.0 / fan_in);
    for (Eigen::Index i = 0; i < w.size(); ++i)
        w.data()[i] = static_cast<T>((2.0 * rng.uniform_double(static_cast<std::uint64_t>(i)) - 1.0) * a);
}

enum class optimizer_kind { adam, adamw, sgd };
constexpr name_table<optimizer_kind, 3> names_of(optimizer_kind)
{
    return {"optimizer",
            {{{optimizer_kind::adam, "adam"}, {optimizer_kind::adamw, "adamw"}, {optimizer_kind::sgd, "sgd"}}}};
}

struct optimizer_options {
    optimizer_kind kind = optimizer_kind::adam;
    double lr = 0.003;
    double weight_decay = 0.0; ///< adam/sgd: L2 added to the gradient; adamw: decoupled
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double momentum = 0.9; ///< sgd
    /// > 0: the learning rate falls linearly to 0 over this many steps (step t = 0, 1, ...
    /// uses lr * (1 - t / decay_steps)), as the reference prototype's schedule; 0: constant.
    std::int64_t decay_steps = 0;
};

/// Optimiser state over a fixed list of parameters.
template <typename T>
class optimizer {
public:
    optimizer(const optimizer_options& options, std::vector<parameter<T>*> params);

    /// One update from each parameter's grad.
    void step();
    std::int64_t steps() const noexcept { return t_; }
    const optimizer_options& options() const noexcept { return opt_; }

    /// State for checkpoints: first and second moments (sgd: velocity in m), per parameter.
    std::vector<matrix<T>>& first_moments() noexcept { return m_; }
    std::vector<matrix<T>>& second_moments() noexcept { return v_; }
    void set_steps(std::int64_t t) noexcept { t_ = t; }

private:
    optimizer_options opt_;
    std::vector<parameter<T>*> params_;
    std::vector<matrix<T>> m_, v_;
    std::int64_t t_ = 0;
};

} // namespace retexo

#include <retexo/kernels/optim_impl.hpp>

namespace retexo {
// Instantiated once, in the library (lib/kernels/optim.cpp), with its flags: a caller's own
// copy, compiled without -fno-math-errno, keeps std::sqrt's errno branch and a scalar loop
// (perf/bench_kernels: 0.15 x triad against 1.0).
extern template class optimizer<float>;
extern template class optimizer<double>;
} // namespace retexo
