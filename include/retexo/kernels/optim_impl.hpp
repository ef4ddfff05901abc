#pragma once
// Template bodies of optim.hpp, which includes this file at its end: include optim.hpp, not this.

#include <algorithm>
#include <cmath>

namespace retexo {

template <typename T>
optimizer<T>::optimizer(const optimizer_options& options, std::vector<parameter<T>*> params)
    : opt_(options), params_(std::move(params))
{
    RETEXO_ENSURE(opt_.lr > 0 && std::isfinite(opt_.lr), "--lr must be a positive number, got " << opt_.lr);
    RETEXO_ENSURE(opt_.decay_steps >= 0, "optimizer: decay_steps must be >= 0, got " << opt_.decay_steps);
    RETEXO_ENSURE(opt_.weight_decay >= 0, "--weight-decay must be >= 0, got " << opt_.weight_decay);
    for (auto* p : params_) {
        m_.push_back(matrix<T>::Zero(p->value.rows(), p->value.cols()));
        v_.push_back(matrix<T>::Zero(p->value.rows(), p->value.cols()));
    }
}

template <typename T>
void optimizer<T>::step()
{
    const double lr =
        opt_.decay_steps > 0
            ? opt_.lr * std::max(0.0, 1.0 - static_cast<double>(t_) / static_cast<double>(opt_.decay_steps))
            : opt_.lr;
    const double wd = opt_.weight_decay;
    ++t_;
    for (std::size_t k = 0; k < params_.size(); ++k) {
        auto& p = *params_[k];
        T* w = p.value.data();
        const T* g = p.grad.data();
        T* m = m_[k].data();
        T* v = v_[k].data();
        const auto n = p.value.size();
        switch (opt_.kind) {
        case optimizer_kind::adam:
        case optimizer_kind::adamw: {
            const double b1 = opt_.beta1, b2 = opt_.beta2;
            const double c1 = 1.0 - std::pow(b1, static_cast<double>(t_));
            const double c2 = 1.0 - std::pow(b2, static_cast<double>(t_));
            const bool decoupled = opt_.kind == optimizer_kind::adamw;
#pragma omp parallel for schedule(static) if (worth_threads(n * 4))
            for (Eigen::Index i = 0; i < n; ++i) {
                double gi = g[i];
                if (!decoupled) gi += wd * w[i];
                m[i] = static_cast<T>(b1 * m[i] + (1 - b1) * gi);
                v[i] = static_cast<T>(b2 * v[i] + (1 - b2) * gi * gi);
                const double mh = m[i] / c1, vh = v[i] / c2;
                double wi = w[i];
                if (decoupled) wi -= lr * wd * wi;
                w[i] = static_cast<T>(wi - lr * mh / (std::sqrt(vh) + opt_.eps));
            }
            break;
        }
        case optimizer_kind::sgd:
            for (Eigen::Index i = 0; i < n; ++i) {
                const double gi = g[i] + wd * w[i];
                m[i] = static_cast<T>(opt_.momentum * m[i] + gi);
                w[i] = static_cast<T>(w[i] - lr * m[i]);
            }
            break;
        }
    }
}

} // namespace retexo
