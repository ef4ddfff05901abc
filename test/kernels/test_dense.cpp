#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/kernels/optim.hpp>

#include <omp.h>

#include <array>

using namespace retexo;
using test::random_matrix;

TEST_CASE("activations: values and finite-difference gradients", "[kernels][dense][gradcheck]")
{
    matrix<double> x(1, 4);
    x << -2.0, -0.5, 0.5, 3.0;
    matrix<double> y(1, 4);
    activation_forward(activation::relu, x.data(), 4, y.data());
    CHECK(y(0, 0) == 0.0);
    CHECK(y(0, 3) == 3.0);
    activation_forward(activation::leaky_relu, x.data(), 4, y.data(), 0.1);
    CHECK(y(0, 0) == Approx(-0.2));
    activation_forward(activation::elu, x.data(), 4, y.data(), 1.0);
    CHECK(y(0, 0) == Approx(std::expm1(-2.0)));
    CHECK_THROWS_WITH(parse_name<activation>("gelu"), Catch::Contains("unknown activation 'gelu'"));
    for (auto a : {activation::relu, activation::leaky_relu, activation::elu}) {
        auto z = random_matrix(3, 5, 7);
        for (Eigen::Index i = 0; i < z.size(); ++i)
            if (std::abs(z.data()[i]) < 1e-3) z.data()[i] = 0.1; // stay off the kink
        const auto r = random_matrix(3, 5, 8);
        auto f = [&] {
            matrix<double> o(3, 5);
            activation_forward(a, z.data(), 15, o.data(), 0.3);
            return (o.array() * r.array()).sum();
        };
        matrix<double> dz(3, 5);
        activation_backward(a, z.data(), r.data(), 15, dz.data(), 0.3);
        test::check_gradient(f, z, dz, "activation");
    }
}

TEST_CASE("layer norm: values and finite-difference gradients", "[kernels][dense][gradcheck]")
{
    const int n = 4, w = 6;
    auto x = random_matrix(n, w, 1, 3.0);
    auto gamma = random_matrix(1, w, 2);
    auto beta = random_matrix(1, w, 3);
    const auto r = random_matrix(n, w, 4);
    matrix<double> y(n, w), mean(n, 1), rstd(n, 1);
    layer_norm_forward(x.data(), n, w, gamma.data(), beta.data(), 1e-5, y.data(), mean.data(), rstd.data());
    const double m0 = x.row(0).mean();
    const double v0 = (x.row(0).array() - m0).square().mean();
    CHECK(y(0, 2) == Approx((x(0, 2) - m0) / std::sqrt(v0 + 1e-5) * gamma(0, 2) + beta(0, 2)));
    auto f = [&] {
        matrix<double> o(n, w), mm(n, 1), rs(n, 1);
        layer_norm_forward(x.data(), n, w, gamma.data(), beta.data(), 1e-5, o.data(), mm.data(), rs.data());
        return (o.array() * r.array()).sum();
    };
    matrix<double> dx(n, w), dg(1, w), db(1, w);
    layer_norm_backward(x.data(), r.data(), n, w, gamma.data(), mean.data(), rstd.data(), dx.data(), dg.data(),
                        db.data());
    test::check_gradient(f, x, dx, "layer norm x");
    test::check_gradient(f, gamma, dg, "layer norm gamma");
    test::check_gradient(f, beta, db, "layer norm beta");
}

TEST_CASE("dropout masks depend on global row ids only", "[kernels][dense][determinism]")
{
    const matrix_f x = matrix_f::Ones(1000, 50);
    std::vector<node_t> ids(1000);
    for (int i = 0; i < 1000; ++i)
        ids[i] = 5000 + 3 * i;
    const dropout_key key{.seed = 42, .layer = 1, .step = 7};
    matrix_f a(1000, 50), b(1000, 50);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    dropout_forward(x.data(), ids, 50, 0.3, key, a.data());
    omp_set_num_threads(2);
    dropout_forward(x.data(), ids, 50, 0.3, key, b.data());
    omp_set_num_threads(saved);
    CHECK(a == b);
    const double kept = (a.array() > 0).cast<double>().mean();
    CHECK(kept == Approx(0.7).margin(0.01));
    CHECK(a.maxCoeff() == Approx(1.0 / 0.7));
    // The same node keeps the same mask wherever its row sits.
    const std::vector<node_t> one = {ids[17]};
    matrix_f single(1, 50);
    dropout_forward(x.data(), one, 50, 0.3, key, single.data());
    CHECK(single.row(0) == a.row(17));
    // Backward applies the same mask.
    matrix_f g(1000, 50);
    dropout_backward(x.data(), ids, 50, 0.3, key, g.data());
    CHECK(g == a);
    // Another step draws another mask.
    dropout_forward(x.data(), ids, 50, 0.3, dropout_key{.seed = 42, .layer = 1, .step = 8}, b.data());
    CHECK(a != b);
}

TEST_CASE("dropout keeps an entry when its 16-bit lane of the row's counter draw passes p", "[kernels][dense]")
{
    // The definition, entry by entry: column c of a row mask_width wide is lane c % 4 of draw
    // row_id * ceil(mask_width / 4) + c / 4.  Widths past one 256-column chunk, not a multiple
    // of four, and column ranges that start inside a draw (column blocks) all follow it.
    const dropout_key key{.seed = 3, .layer = 2, .step = 11};
    const double p = 0.35;
    const auto rng = key.rng();
    const std::vector<node_t> ids = {0, 7, 123456};
    for (const auto [col0, w, mask_width] :
         {std::array<int, 3>{0, 601, 0}, std::array<int, 3>{5, 262, 300}, std::array<int, 3>{2, 1, 3}}) {
        const int width = std::max(col0 + w, mask_width);
        const auto groups = static_cast<std::uint64_t>((width + 3) / 4);
        const matrix_f x = random_matrix(3, w, 4).cast<float>();
        matrix_f y(3, w);
        dropout_forward(x.data(), ids, w, p, key, y.data(), col0, mask_width);
        int mismatches = 0;
        for (int r = 0; r < 3; ++r)
            for (int j = 0; j < w; ++j) {
                const auto c = static_cast<std::uint64_t>(col0) + static_cast<std::uint64_t>(j);
                const std::uint64_t lane =
                    (rng.bits(static_cast<std::uint64_t>(ids[r]) * groups + c / 4) >> (16 * (c % 4))) & 0xFFFFU;
                const float expected = lane >= static_cast<std::uint64_t>(p * 65536.0)
                                           ? x(r, j) * static_cast<float>(1.0 / (1.0 - p))
                                           : 0.0F;
                mismatches += y(r, j) != expected;
            }
        CHECK(mismatches == 0);
    }
}

TEST_CASE("softmax cross-entropy: value and gradient", "[kernels][loss][gradcheck]")
{
    auto z = random_matrix(6, 4, 1);
    const std::vector<std::int32_t> labels = {0, 3, 1, 2, 2, 0};
    const std::vector<node_t> rows = {1, 2, 5};
    auto f = [&] { return softmax_cross_entropy<double>(z.data(), 4, labels, rows, 1.0, nullptr).sum / 3.0; };
    matrix<double> dz = matrix<double>::Zero(6, 4);
    const auto res = softmax_cross_entropy<double>(z.data(), 4, labels, rows, 1.0 / 3.0, dz.data());
    CHECK(res.count == 3);
    double expected = 0; // the loss summed over the rows, in plain loops
    for (node_t r : rows) {
        double s = 0;
        for (Eigen::Index c = 0; c < z.cols(); ++c)
            s += std::exp(z(r, c));
        expected += std::log(s) - z(r, labels[static_cast<std::size_t>(r)]);
    }
    CHECK(res.sum == Approx(expected).epsilon(1e-12));
    test::check_gradient(f, z, dz, "cross-entropy");
    CHECK(dz.row(0).isZero());
}

TEST_CASE("accuracy and micro-F1", "[kernels][loss]")
{
    matrix_f z(4, 3);
    z << 1, 0, 0, 0, 2, 1, 0, 0, 3, 5, 1, 0;
    const std::vector<std::int32_t> labels = {0, 1, 1, 0};
    const std::vector<node_t> rows = {0, 1, 2, 3};
    CHECK(count_correct(z.data(), 3, labels, rows) == 3);
    const auto cm = confusion_matrix(z.data(), 3, labels, rows);
    CHECK(micro_f1(cm, 3) == Approx(0.75));
    CHECK(predict(z.data(), 4, 3) == std::vector<std::int32_t>{0, 1, 2, 0});
}

TEST_CASE("optimisers: Adam's steps bit for bit as the textbook formula", "[kernels][optim]")
{
    // The kernel against Adam written plainly (double arithmetic, float state), 200 steps of
    // random gradients: every value and moment the same bits.
    parameter<float> p("w", 37, 29);
    p.value = random_matrix(37, 29, 3).cast<float>();
    matrix_f w = p.value, m = matrix_f::Zero(37, 29), v = matrix_f::Zero(37, 29);
    const optimizer_options o{.kind = optimizer_kind::adam, .lr = 0.01, .weight_decay = 5e-4};
    optimizer<float> opt(o, {&p});
    for (int t = 1; t <= 200; ++t) {
        p.grad =
            random_matrix(37, 29, 100 + static_cast<std::uint64_t>(t)).cast<float>() * (t % 7 == 0 ? 1e-30F : 1.0F);
        p.grad(0, 0) = 0; // a zero gradient too
        opt.step();
        const double c1 = 1 - std::pow(o.beta1, t), c2 = 1 - std::pow(o.beta2, t);
        for (Eigen::Index i = 0; i < w.size(); ++i) {
            const double g = p.grad.data()[i] + o.weight_decay * w.data()[i];
            m.data()[i] = static_cast<float>(o.beta1 * m.data()[i] + (1 - o.beta1) * g);
            v.data()[i] = static_cast<float>(o.beta2 * v.data()[i] + (1 - o.beta2) * g * g);
            const double mh = m.data()[i] / c1, vh = v.data()[i] / c2;
            w.data()[i] = static_cast<float>(w.data()[i] - o.lr * mh / (std::sqrt(vh) + o.eps));
        }
        REQUIRE(p.value == w);
        REQUIRE(opt.first_moments()[0] == m);
        REQUIRE(opt.second_moments()[0] == v);
    }
}

TEST_CASE("optimisers: one step by hand", "[kernels][optim]")
{
    parameter<double> p("w", 1, 2);
    p.value << 1.0, -2.0;
    p.grad << 0.5, 0.25;
    SECTION("adam with L2 weight decay")
    {
        optimizer<double> opt({.kind = optimizer_kind::adam, .lr = 0.1, .weight_decay = 0.1}, {&p});
        opt.step();
        // first step: m_hat = g', v_hat = g'^2 -> update lr * sign(g') (eps aside)
        CHECK(p.value(0, 0) == Approx(1.0 - 0.1).epsilon(1e-6));
        CHECK(p.value(0, 1) == Approx(-2.0 - 0.1 * (0.25 - 0.2) / std::abs(0.25 - 0.2)).epsilon(1e-6));
    }
    SECTION("adamw decoupled weight decay")
    {
        optimizer<double> opt({.kind = optimizer_kind::adamw, .lr = 0.1, .weight_decay = 0.1}, {&p});
        opt.step();
        CHECK(p.value(0, 0) == Approx(1.0 * (1 - 0.01) - 0.1).epsilon(1e-6));
        CHECK(p.value(0, 1) == Approx(-2.0 * (1 - 0.01) - 0.1).epsilon(1e-6));
    }
    SECTION("sgd with momentum")
    {
        optimizer<double> opt({.kind = optimizer_kind::sgd, .lr = 0.1, .momentum = 0.9}, {&p});
        opt.step();
        opt.step();
        // v1 = g, v2 = 0.9 g + g (same g): w = w0 - lr (g + 1.9 g)
        CHECK(p.value(0, 0) == Approx(1.0 - 0.1 * 2.9 * 0.5));
    }
    SECTION("linear decay: step t uses lr (1 - t/T), then 0")
    {
        optimizer<double> opt({.kind = optimizer_kind::sgd, .lr = 0.1, .momentum = 0, .decay_steps = 4}, {&p});
        double w = 1.0;
        for (int t = 0; t < 6; ++t) {
            opt.step();
            w -= 0.1 * std::max(0.0, 1.0 - t / 4.0) * 0.5;
            CHECK(p.value(0, 0) == Approx(w).epsilon(1e-12));
        }
        CHECK(p.value(0, 0) == Approx(1.0 - 0.1 * 0.5 * (1 + 0.75 + 0.5 + 0.25)));
    }
    SECTION("bad options")
    {
        CHECK_THROWS_WITH(optimizer<double>({.lr = -1}, {&p}), Catch::Contains("--lr must be a positive number"));
        CHECK_THROWS_WITH(optimizer<double>({.decay_steps = -1}, {&p}), Catch::Contains("decay_steps must be >= 0"));
        CHECK_THROWS_WITH(parse_name<optimizer_kind>("lbfgs"), Catch::Contains("unknown optimizer 'lbfgs'"));
    }
}

TEST_CASE("initialisers are seeded and bounded", "[kernels][optim]")
{
    matrix_f a(64, 32), b(64, 32);
    xavier_uniform(a, 64, 32, counter_rng(1, 2));
    xavier_uniform(b, 64, 32, counter_rng(1, 2));
    CHECK(a == b);
    CHECK(a.cwiseAbs().maxCoeff() <= std::sqrt(6.0F / 96));
    kaiming_uniform(b, 64, counter_rng(1, 3));
    CHECK(b.cwiseAbs().maxCoeff() <= std::sqrt(6.0F / 64));
    CHECK(a != b);
}

TEST_CASE("vectorisable exp is accurate", "[kernels][dense]")
{
    double worst = 0;
    for (float x = -87.0F; x <= 88.0F; x += 0.0137F)
        worst = std::max(worst, std::abs(static_cast<double>(vexp(x)) - std::exp(static_cast<double>(x))) /
                                    std::exp(static_cast<double>(x)));
    CHECK(worst < 3e-7);
    CHECK(vexp(-100.0F) == 0.0F);
    CHECK(vexp(0.0F) == 1.0F);
}

TEST_CASE("vectorisable expm1 is accurate, also near 0", "[kernels][dense]")
{
    // Relative to the result: near 0, exp(x) - 1 computed as vexp(x) - 1 would lose digits.
    double worst = 0;
    for (float x = -87.0F; x <= 88.0F; x += 0.0137F)
        if (x != 0.0F)
            worst = std::max(worst, std::abs(static_cast<double>(vexpm1(x)) - std::expm1(static_cast<double>(x))) /
                                        std::abs(std::expm1(static_cast<double>(x))));
    for (float x = 1e-8F; x < 0.4F; x *= 1.37F)
        for (float sx : {x, -x})
            worst = std::max(worst, std::abs(static_cast<double>(vexpm1(sx)) - std::expm1(static_cast<double>(sx))) /
                                        std::abs(std::expm1(static_cast<double>(sx))));
    CHECK(worst < 3e-7);
    CHECK(vexpm1(-100.0F) == -1.0F);
    CHECK(vexpm1(0.0F) == 0.0F);
}
