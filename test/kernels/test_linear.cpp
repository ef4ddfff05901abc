#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/linear.hpp>

#include <omp.h>

using namespace retexo;
using test::random_matrix;

TEST_CASE("linear backward matches finite differences", "[kernels][linear][gradcheck]")
{
    const linear_kernel k(5, 3);
    auto x = random_matrix(7, 5, 1);
    auto w = random_matrix(5, 3, 2);
    auto b = random_matrix(1, 3, 3);
    const auto r = random_matrix(7, 3, 4);
    auto f = [&] {
        matrix<double> y;
        k.forward(x, w, b, y);
        return (y.array() * r.array()).sum();
    };
    matrix<double> dx, dw, db;
    k.backward(x, r, w, &dx, dw, &db);
    test::check_gradient(f, x, dx, "linear x");
    test::check_gradient(f, w, dw, "linear W");
    test::check_gradient(f, b, db, "linear b");
}

TEST_CASE("oneDNN linear matches the reference in float", "[kernels][linear]")
{
    for (auto [n, in, out] : {std::tuple{1, 3, 2}, std::tuple{1000, 33, 17}, std::tuple{5000, 128, 64}}) {
        const linear_kernel k(in, out);
        const matrix_f x = random_matrix(n, in, 1).cast<float>();
        const matrix_f w = random_matrix(in, out, 2).cast<float>();
        const matrix_f b = random_matrix(1, out, 3).cast<float>();
        const matrix_f dy = random_matrix(n, out, 4).cast<float>();
        matrix_f y, dx, dw, db;
        k.forward(x, w, b, y);
        k.backward(x, dy, w, &dx, dw, &db);
        matrix_f ry(n, out), rdx(n, in), rdw(in, out), rdb(1, out);
        reference::linear_forward(x.data(), n, in, out, w.data(), b.data(), ry.data());
        reference::linear_backward(x.data(), dy.data(), n, in, out, w.data(), rdx.data(), rdw.data(), rdb.data());
        const float tol = 1e-4F * std::sqrt(static_cast<float>(std::max(n, in)));
        CHECK((y - ry).cwiseAbs().maxCoeff() <= tol * (1 + ry.cwiseAbs().maxCoeff()));
        CHECK((dx - rdx).cwiseAbs().maxCoeff() <= tol * (1 + rdx.cwiseAbs().maxCoeff()));
        CHECK((dw - rdw).cwiseAbs().maxCoeff() <= tol * (1 + rdw.cwiseAbs().maxCoeff()));
        CHECK((db - rdb).cwiseAbs().maxCoeff() <= tol * (1 + rdb.cwiseAbs().maxCoeff()));
    }
}

TEST_CASE("linear is bit-identical for 1 and 2 threads", "[kernels][linear][determinism]")
{
    const linear_kernel k(96, 64);
    const matrix_f x = random_matrix(20000, 96, 1).cast<float>();
    const matrix_f w = random_matrix(96, 64, 2).cast<float>();
    const matrix_f b = random_matrix(1, 64, 3).cast<float>();
    const matrix_f dy = random_matrix(20000, 64, 4).cast<float>();
    const int saved = omp_get_max_threads();
    matrix_f y[2], dx[2], dw[2], db[2];
    for (int t = 0; t < 2; ++t) {
        omp_set_num_threads(t + 1);
        k.forward(x, w, b, y[t]);
        k.backward(x, dy, w, &dx[t], dw[t], &db[t]);
    }
    omp_set_num_threads(saved);
    CHECK(y[0] == y[1]);
    CHECK(dx[0] == dx[1]);
    CHECK(dw[0] == dw[1]);
    CHECK(db[0] == db[1]);
}

TEST_CASE("a row's linear output does not depend on the rows computed with it", "[kernels][linear][determinism]")
{
    // A rank computes the rows its partition gave it; each must get the bits it gets in one
    // process.  oneDNN's GEMM takes rows in register-blocked groups, and a row left in a
    // smaller last group (or a single-row call) is summed in another order: every window
    // below puts row r0 among a different count of rows and at a different position.
    const int n = 1200, in = 300, out = 70;
    const linear_kernel k(in, out);
    const matrix_f x = random_matrix(n, in, 1).cast<float>();
    const matrix_f w = random_matrix(in, out, 2).cast<float>();
    const matrix_f b = random_matrix(1, out, 3).cast<float>();
    const matrix_f dy = random_matrix(n, out, 4).cast<float>();
    matrix_f y, dx;
    k.forward(x, w, b, y);
    k.backward_data(dy.data(), n, w.data(), (dx = matrix_f(n, in)).data());
    for (auto [r0, m] : {std::pair{0, 1}, std::pair{5, 1}, std::pair{3, 7}, std::pair{17, 32}, std::pair{100, 49},
                         std::pair{1, 500}, std::pair{30, 1100}, std::pair{0, 481}}) {
        INFO("rows " << r0 << " to " << r0 + m);
        const matrix_f xs = x.middleRows(r0, m), dys = dy.middleRows(r0, m);
        matrix_f ys, dxs(m, in);
        k.forward(xs, w, b, ys);
        k.backward_data(dys.data(), m, w.data(), dxs.data());
        CHECK(ys == y.middleRows(r0, m));
        CHECK(dxs == dx.middleRows(r0, m));
    }
}

TEST_CASE("exact X^T D is order independent and close to the float product", "[kernels][exact]")
{
    const matrix_f x = random_matrix(3000, 20, 1).cast<float>();
    const matrix_f d = random_matrix(3000, 12, 2).cast<float>();
    const double bound = 3000.0 * exact::max_abs(x.data(), x.size()) * exact::max_abs(d.data(), d.size());
    const int k = exact::scale_exponent(bound);
    std::vector<std::int64_t> full(20 * 12, 0), split(20 * 12, 0);
    exact::gemm_tn(x.data(), d.data(), 3000, 20, 12, k, full.data());
    // Rows in three uneven groups, in a different order.
    exact::gemm_tn(x.data() + 2000 * 20, d.data() + 2000 * 12, 1000, 20, 12, k, split.data());
    exact::gemm_tn(x.data(), d.data(), 1200, 20, 12, k, split.data());
    exact::gemm_tn(x.data() + 1200 * 20, d.data() + 1200 * 12, 800, 20, 12, k, split.data());
    CHECK(full == split);
    matrix_f viaexact(20, 12);
    exact::to_real(full.data(), full.size(), k, viaexact.data());
    const matrix<double> ref = x.cast<double>().transpose() * d.cast<double>();
    CHECK((viaexact.cast<double>() - ref).cwiseAbs().maxCoeff() < 1e-4);
    std::vector<std::int64_t> cs(12, 0);
    exact::colsum(d.data(), 3000, 12, k, cs.data());
    matrix_f colsum(1, 12);
    exact::to_real(cs.data(), 12, k, colsum.data());
    CHECK((colsum.cast<double>() - d.cast<double>().colwise().sum()).cwiseAbs().maxCoeff() < 1e-4);
    CHECK_THROWS_WITH(exact::scale_exponent(std::nan("")), Catch::Contains("not a finite"));
}

TEST_CASE("linear rejects mismatched shapes and non-finite input", "[kernels][linear][bad-input]")
{
    const linear_kernel k(4, 3);
    matrix_f y, dx, dw, db;
    CHECK_THROWS_WITH(k.forward(matrix_f(2, 5), matrix_f(4, 3), matrix_f(), y),
                      Catch::Contains("x columns is 5, expected 4"));
    CHECK_THROWS_WITH(k.forward(matrix_f(2, 4), matrix_f(3, 4), matrix_f(), y),
                      Catch::Contains("weight is 3 x 4, expected 4 x 3"));
    CHECK_THROWS_WITH(k.forward(matrix_f(2, 4), matrix_f(4, 3), matrix_f(1, 2), y),
                      Catch::Contains("bias has 2 entries"));
    CHECK_THROWS_WITH(k.backward(matrix_f(2, 4), matrix_f(3, 3), matrix_f(4, 3), &dx, dw, &db),
                      Catch::Contains("dy rows is 3, expected 2"));
    CHECK_THROWS_WITH(linear_kernel(0, 3), Catch::Contains("dimensions must be positive"));
    set_check_numerics(true);
    matrix_f x = matrix_f::Ones(2, 4);
    x(1, 2) = INFINITY;
    CHECK_THROWS_WITH(k.forward(x, matrix_f(matrix_f::Ones(4, 3)), matrix_f(), y),
                      Catch::Contains("linear::forward: x holds a non-finite value"));
    set_check_numerics(false);
}
