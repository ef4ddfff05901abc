#pragma once
// Central finite differences in double precision for gradient checks.

#include <retexo/core/rng.hpp>
#include <retexo/core/types.hpp>

#include <catch2/catch.hpp>

#include <functional>

namespace retexo::test {

/// Random matrix with entries N(0, 1) (deterministic from seed).
inline matrix<double> random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed, double scale = 1.0)
{
    const counter_rng rng(seed, 1234);
    matrix<double> m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i)
        m.data()[i] = scale * rng.normal(static_cast<std::uint64_t>(i));
    return m;
}

/// Check the analytic gradient `grad` of scalar f at x against central differences.
inline void check_gradient(const std::function<double()>& f, matrix<double>& x, const matrix<double>& grad,
                           const std::string& what, double h = 1e-6, double tol = 1e-6)
{
    REQUIRE(grad.rows() == x.rows());
    REQUIRE(grad.cols() == x.cols());
    double worst = 0;
    Eigen::Index worst_i = -1;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
        const double keep = x.data()[i];
        x.data()[i] = keep + h;
        const double fp = f();
        x.data()[i] = keep - h;
        const double fm = f();
        x.data()[i] = keep;
        const double fd = (fp - fm) / (2 * h);
        const double err = std::abs(fd - grad.data()[i]) / std::max(1.0, std::abs(fd));
        if (err > worst) {
            worst = err;
            worst_i = i;
        }
    }
    INFO("gradient of " << what << ": worst relative error " << worst << " at element " << worst_i);
    CHECK(worst < tol);
}

} // namespace retexo::test
