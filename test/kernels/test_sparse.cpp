// Sparse rows and their kernels against the dense kernels on the dense form of the input.
#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/kernels/exact.hpp>
#include <retexo/kernels/linear.hpp>
#include <retexo/kernels/sparse.hpp>
#include <retexo/nn/reduce.hpp>

#include <omp.h>

using namespace retexo;

namespace {

/// rows x cols with about `density` of the entries non-zero (and a few empty rows).
matrix_f sparse_random(Eigen::Index rows, Eigen::Index cols, double density, std::uint64_t seed)
{
    const counter_rng rng(seed, 3);
    matrix_f x = matrix_f::Zero(rows, cols);
    for (Eigen::Index i = 0; i < x.size(); ++i)
        if (rng.uniform_double(2 * static_cast<std::uint64_t>(i)) < density && (i / cols) % 7 != 3)
            x.data()[i] = static_cast<float>(rng.normal(2 * static_cast<std::uint64_t>(i) + 1));
    return x;
}

/// A random in-edge CSR over `rows` rows with `sources` source rows.
csr random_edges(node_t rows, node_t sources, int per_row, std::uint64_t seed)
{
    const counter_rng rng(seed, 4);
    std::vector<node_t> src, dst;
    for (std::uint64_t e = 0; e < static_cast<std::uint64_t>(rows) * per_row; ++e) {
        src.push_back(static_cast<node_t>(rng.below(2 * e, static_cast<std::uint64_t>(sources))));
        dst.push_back(static_cast<node_t>(rng.below(2 * e + 1, static_cast<std::uint64_t>(rows))));
    }
    csr g = build_csr(std::max(rows, sources), src, dst);
    g.offsets.resize(static_cast<std::size_t>(rows) + 1);
    g.sources.resize(static_cast<std::size_t>(g.offsets.back()));
    return g;
}

/// The products of x (dense x_dense, stored as `input`: sparse rows or column blocks) by k
/// against the reference, within tol, and the same bits at every thread count.
template <typename X>
void check_linear_products(const linear_kernel& k, const X& input, const matrix_f& x_dense, const matrix_f& w,
                           const matrix_f& b, const matrix_f& dy, double tol)
{
    const auto n = x_dense.rows();
    const int in = k.in(), out = k.out();
    std::vector<float> ref_y(static_cast<std::size_t>(n) * out), ref_dx(static_cast<std::size_t>(n) * in),
        ref_dw(static_cast<std::size_t>(in) * out), ref_db(static_cast<std::size_t>(out));
    reference::linear_forward(x_dense.data(), n, in, out, w.data(), b.data(), ref_y.data());
    reference::linear_backward(x_dense.data(), dy.data(), n, in, out, w.data(), ref_dx.data(), ref_dw.data(),
                               ref_db.data());
    matrix_f y0, dw0;
    test::at_thread_counts([&](int t) {
        INFO(t << " threads");
        matrix_f y, dw(in, out);
        k.forward(input, w, b, y);
        k.backward_weights(input, dy.data(), dw.data());
        for (Eigen::Index i = 0; i < y.size(); ++i)
            CHECK(y.data()[i] == Approx(ref_y[static_cast<std::size_t>(i)]).epsilon(tol).margin(tol));
        for (Eigen::Index i = 0; i < dw.size(); ++i)
            CHECK(dw.data()[i] == Approx(ref_dw[static_cast<std::size_t>(i)]).epsilon(tol).margin(tol));
        if (t == 1) {
            y0 = y;
            dw0 = dw;
        }
        CHECK(y == y0);
        CHECK(dw == dw0);
    });
}

} // namespace

TEST_CASE("csr_matrix: dense round trip, row selection, stacking, validation", "[kernels][sparse]")
{
    const matrix_f x = sparse_random(9, 6, 0.3, 1);
    const auto s = csr_matrix::from_dense(x);
    REQUIRE_NOTHROW(s.validate("s"));
    CHECK(s.to_dense() == x);
    CHECK(s.nnz() == (x.array() != 0).count());
    const std::vector<node_t> rows{4, 0, 4, 8};
    const auto sel = s.select_rows(rows).to_dense();
    for (std::size_t i = 0; i < rows.size(); ++i)
        CHECK(sel.row(static_cast<Eigen::Index>(i)) == x.row(rows[i]));
    CHECK(s.middle_rows(2, 5).to_dense() == x.middleRows(2, 3));
    const matrix_f y = sparse_random(9, 4, 0.5, 2);
    matrix_f xy(9, 10);
    xy << x, y;
    CHECK(hstack(s, csr_matrix::from_dense(y)).to_dense() == xy);
    // beside(): the columns in order, each block in its storage, neighbouring sparse ones joined.
    matrix_f yx(9, 10);
    yx << y, x;
    const node_features dense_left = beside(node_features(y), node_features(s));
    REQUIRE(dense_left.is_blocks());
    CHECK(dense_left.as<column_blocks>().blocks.size() == 2);
    CHECK(dense_left.cols() == 10);
    CHECK(dense_left.to_dense() == yx);
    CHECK(beside(node_features(s), node_features(y)).to_dense() == xy);
    CHECK(beside(node_features(s), node_features(csr_matrix::from_dense(y))).sparse() ==
          hstack(s, csr_matrix::from_dense(y)));
    CHECK(beside(node_features(x), node_features(y)).to_dense() == xy);
    CHECK(beside(node_features(x), node_features(y)).as<column_blocks>().blocks.size() == 2); // no copy
    matrix_f yyxy(9, 18);
    yyxy << y, y, x, y;
    const node_features wider = beside(beside(node_features(y), dense_left), node_features(y));
    REQUIRE(wider.as<column_blocks>().blocks.size() == 4); // [y | y | x | y]
    CHECK(std::get<matrix_f>(wider.as<column_blocks>().blocks[1]).cols() == 4);
    CHECK(wider.to_dense() == yyxy);
    const std::vector<node_t> picked{8, 1, 1};
    CHECK(wider.select_rows(picked).to_dense() == node_features(yyxy).select_rows(picked).dense());
    CHECK(wider == beside(beside(node_features(y), dense_left), node_features(y)));
    CHECK_FALSE(wider == node_features(yyxy));
    CHECK_THROWS_WITH(beside(node_features(y), node_features(s.middle_rows(0, 3))), Catch::Contains("9 rows beside 3"));
    CHECK_THROWS_WITH(wider.sparse(), Catch::Contains("stored blocks, not as sparse"));
    const node_features f(s);
    CHECK(f.is_sparse());
    CHECK(f.rows() == 9);
    CHECK(f.cols() == 6);
    CHECK_THROWS_WITH(f.dense(), Catch::Contains("the features are stored sparse, not as dense"));
    auto bad = s;
    std::swap(bad.indices[0], bad.indices[1]);
    if (s.row_nnz(0) >= 2) CHECK_THROWS_WITH(bad.validate("bad.h5"), Catch::Contains("out of order"));
    bad = s;
    bad.indices.back() = 6;
    CHECK_THROWS_WITH(bad.validate("bad.h5"), Catch::Contains("outside [0, 6)"));
    bad = s;
    bad.offsets.pop_back();
    CHECK_THROWS_WITH(bad.validate("bad.h5"), Catch::Contains("row offsets"));
}

TEST_CASE("sparse linear map and its weight gradient match the dense kernels", "[kernels][sparse]")
{
    const int in = 37, out = 19;
    const matrix_f x = sparse_random(300, in, 0.08, 3);
    const auto s = csr_matrix::from_dense(x);
    const matrix_f w = test::random_matrix(in, out, 4).cast<float>();
    const matrix_f b = test::random_matrix(1, out, 5).cast<float>();
    const matrix_f dy = test::random_matrix(300, out, 6).cast<float>();
    const linear_kernel k(in, out);
    const auto check_products = [&](const auto& input) { check_linear_products(k, input, x, w, b, dy, 1e-5); };
    check_products(s);
    SECTION("exact: the fixed-point gradient of the dense form, bit for bit")
    {
        std::vector<std::int64_t> dense(static_cast<std::size_t>(in) * out, 0), sparse(dense.size(), 0);
        exact::gemm_tn(x.data(), dy.data(), 300, in, out, 20, dense.data());
        exact::sparse_gemm_tn(s, dy.data(), out, 20, sparse.data());
        CHECK(sparse == dense);
    }
    SECTION("column blocks: dense, sparse, dense, each in its own kernel")
    {
        // x's first 11 columns dense (every value stored), 20 sparse, the last 6 dense.
        const int d = 11;
        const column_blocks xs{
            {matrix_f(x.leftCols(d)), csr_matrix::from_dense(x.middleCols(d, 20)), matrix_f(x.rightCols(in - d - 20))}};
        REQUIRE(node_features(xs).to_dense() == x);
        check_products(xs);
        // Exact mode: the fixed-point gradient of the dense form, bit for bit.
        parameter<float> from_split("w", in, out), from_dense("w", in, out);
        nn::reduce_mode mode;
        mode.exact = true;
        mode.global_terms = 1000;
        nn::weight_gradient(from_split, k, xs, dy.data(), mode);
        nn::weight_gradient(from_dense, k, x, dy.data(), mode);
        CHECK(from_split.exact_k == from_dense.exact_k);
        CHECK(from_split.exact == from_dense.exact);
        matrix_f y;
        CHECK_THROWS_WITH(k.forward(column_blocks{{matrix_f(x.leftCols(d)), csr_matrix(300, 3)}}, w, b, y),
                          Catch::Contains("x columns"));
    }
}

TEST_CASE("column blocks: dense blocks side by side are one product of several terms", "[kernels][sparse][linear]")
{
    // [dense 40 | dense 50 | sparse 20 | dense 30]: the first two dense blocks are one
    // row-blocked product of two terms (one parallel region), the last its own.  500 rows: a
    // 480-row tile and a tail tile of 24 rows keeping 20, in 64-column blocks (out 200).  And
    // 30 rows: a product small enough to run off the thread pool.
    const int in = 140, out = 200;
    const matrix_f w = test::random_matrix(in, out, 12).cast<float>();
    const matrix_f b = test::random_matrix(1, out, 13).cast<float>();
    const linear_kernel k(in, out);
    for (const Eigen::Index n : {Eigen::Index{500}, Eigen::Index{30}}) {
        INFO(n << " rows");
        matrix_f x = test::random_matrix(n, in, 14).cast<float>();
        x.middleCols(90, 20) = sparse_random(n, 20, 0.1, 15);
        const matrix_f dy = test::random_matrix(n, out, 16).cast<float>();
        const column_blocks xs{{matrix_f(x.leftCols(40)), matrix_f(x.middleCols(40, 50)),
                                csr_matrix::from_dense(x.middleCols(90, 20)), matrix_f(x.rightCols(30))}};
        check_linear_products(k, xs, x, w, b, dy, 1e-4);
    }
}

TEST_CASE("gathering and dropping out rows in one pass gives the bits of the two steps", "[kernels][sparse]")
{
    // 3,000 rows 60 wide, 2,900 of them gathered: enough to run on threads.
    const matrix_f x = sparse_random(3000, 60, 0.5, 17);
    std::vector<node_t> rows, ids;
    for (node_t i = 0; i < 2900; ++i) {
        rows.push_back((i * 7) % 3000);
        ids.push_back(5000 + 3 * i);
    }
    const dropout_key key{9, 2, 5};
    const column_blocks xs{{matrix_f(x.leftCols(9)), csr_matrix::from_dense(x.middleCols(9, 21)),
                            matrix_f(x.middleCols(30, 14)), matrix_f(x.rightCols(16))}};
    for (const double p : {0.4, 0.0}) {
        INFO("p " << p);
        matrix_f want;
        gather_rows(x, rows, want);
        dropout_rows(want, ids, p, key, want);
        column_blocks want_blocks;
        gather_rows(xs, rows, want_blocks);
        dropout_rows(want_blocks, ids, p, key, want_blocks);
        REQUIRE(node_features(want_blocks).to_dense() == want);
        test::at_thread_counts([&](int t) {
            INFO(t << " threads");
            matrix_f y;
            gather_dropout_rows(x, rows, ids, p, key, y);
            CHECK(y == want);
            column_blocks ys;
            gather_dropout_rows(xs, rows, ids, p, key, ys);
            CHECK(ys == want_blocks);
            csr_matrix ys_sparse;
            gather_dropout_rows(csr_matrix::from_dense(x), rows, ids, p, key, ys_sparse);
            CHECK(ys_sparse.to_dense() == want);
        });
    }
}

TEST_CASE("sparse products sum their terms in the plain loops' order, bit for bit", "[kernels][sparse]")
{
    // The kernels hold up to 256 output columns in registers; each output must still be the
    // plain loops' chain of multiply-adds: forward over a row's entries (ascending columns),
    // the weight gradient over a column's entries (ascending rows).  Widths cover the 256-,
    // 64- and 16-column blocks and the plain tail.
    // The weight gradient reads a dy of up to 4 MB in place and a larger one by blocks of
    // rows (128 at this density), block_columns at a time: 130 rows, and 4,200 (256 and more
    // columns) across block borders.
    const int in = 45;
    for (int out : {1, 7, 16, 19, 64, 83, 256, 300, 531}) {
        const Eigen::Index n = out < 256 ? 130 : 4200;
        INFO("out " << out << ", " << n << " rows");
        const matrix_f x = sparse_random(n, in, 0.2, 11);
        const auto s = csr_matrix::from_dense(x);
        const matrix_f w = test::random_matrix(in, out, 12).cast<float>();
        const matrix_f b = test::random_matrix(1, out, 13).cast<float>();
        const matrix_f dy = test::random_matrix(n, out, 14).cast<float>();
        matrix_f want_y(n, out), want_dw = matrix_f::Zero(in, out);
        for (Eigen::Index i = 0; i < s.rows; ++i) {
            float* yi = want_y.data() + i * out;
            std::copy(b.data(), b.data() + out, yi);
            for (offset_t e = s.offsets[i]; e < s.offsets[i + 1]; ++e) {
                const float v = s.values[e];
                const float* wj = w.data() + static_cast<std::ptrdiff_t>(s.indices[e]) * out;
                float* dwj = want_dw.data() + static_cast<std::ptrdiff_t>(s.indices[e]) * out;
                const float* d = dy.data() + i * out;
#pragma omp simd
                for (int k = 0; k < out; ++k)
                    yi[k] += v * wj[k];
#pragma omp simd
                for (int k = 0; k < out; ++k)
                    dwj[k] += v * d[k];
            }
        }
        test::at_thread_counts([&](int t) {
            INFO(t << " threads");
            matrix_f y(n, out), dw(in, out);
            sparse_linear_forward(s, w.data(), out, b.data(), y.data());
            sparse_linear_backward_weights(s, dy.data(), out, dw.data());
            CHECK(y == want_y);
            CHECK(dw == want_dw);
        });
    }
}

TEST_CASE("sparse dropout masks the stored values as dense dropout masks the row", "[kernels][sparse]")
{
    const matrix_f x = sparse_random(40, 13, 0.3, 7);
    const auto s = csr_matrix::from_dense(x);
    std::vector<node_t> ids(40);
    for (node_t i = 0; i < 40; ++i)
        ids[static_cast<std::size_t>(i)] = 1000 - 7 * i;
    const dropout_key key{9, 2, 5};
    matrix_f dense(40, 13);
    dropout_forward(x.data(), ids, 13, 0.4, key, dense.data());
    csr_matrix sp;
    dropout_forward(s, ids, 0.4, key, sp);
    CHECK(sp.to_dense() == dense);
    csr_matrix in_place = s;
    dropout_forward(in_place, ids, 0.4, key, in_place);
    CHECK(in_place.values == sp.values);
    dropout_forward(s, ids, 0.0, key, sp);
    CHECK(sp.to_dense() == x);
    // Dense rows dropped into sparse rows: the non-zero entries of the dense dropout, at any
    // thread count (40 rows: three blocks of 16), y's buffers reused from a denser call.
    test::at_thread_counts([&](int t) {
        INFO(t << " threads");
        csr_matrix from_dense_rows;
        dropout_rows(x, ids, 0.0, key, from_dense_rows);
        CHECK(from_dense_rows == csr_matrix::from_dense(x));
        dropout_rows(x, ids, 0.4, key, from_dense_rows);
        CHECK(from_dense_rows == csr_matrix::from_dense(dense));
        CHECK(from_dense_rows.nnz() < s.nnz());
    });
    CHECK_THROWS_WITH(dropout_rows(x, std::span<const node_t>(ids).first(39), 0.4, key, sp),
                      Catch::Contains("39 row ids"));
    // Column blocks are masked as their dense form, whatever the block borders.
    for (int border : {1, 3, 4, 6}) {
        INFO("blocks: " << border << " dense, 5 sparse, the rest dense");
        const column_blocks xs{{matrix_f(x.leftCols(border)), csr_matrix::from_dense(x.middleCols(border, 5)),
                                matrix_f(x.rightCols(8 - border))}};
        column_blocks ys;
        dropout_rows(xs, ids, 0.4, key, ys);
        CHECK(node_features(ys).to_dense() == dense);
        column_blocks in_place_blocks = xs;
        dropout_rows(in_place_blocks, ids, 0.4, key, in_place_blocks);
        CHECK(in_place_blocks == ys);
    }
}

TEST_CASE("sparse aggregation equals dense aggregation bit for bit", "[kernels][sparse][aggregate]")
{
    const node_t rows = 200, sources = 260; // 60 halo-like source rows
    const csr g = random_edges(rows, sources, 5, 8);
    std::vector<offset_t> degree(static_cast<std::size_t>(sources));
    for (node_t v = 0; v < sources; ++v)
        degree[static_cast<std::size_t>(v)] = v < rows ? g.degree(v) : 1 + v % 4;
    const matrix_f x = sparse_random(sources, 31, 0.05, 9);
    const auto s = csr_matrix::from_dense(x);
    const std::vector<node_t> subset{5, 2, 199, 17, 0};
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn}) {
        for (bool some : {false, true}) {
            DYNAMIC_SECTION(name_of(kind) << (some ? " subset" : ""))
            {
                const aggregation plan(g, sources,
                                       {.kind = kind,
                                        .in_degree = kind == aggregator::gcn ? std::span<const offset_t>(degree)
                                                                             : std::span<const offset_t>(),
                                        .rows = some ? std::span<const node_t>(subset) : std::span<const node_t>(),
                                        .backward = false});
                matrix_f dense;
                plan.forward(x, dense);
                test::at_thread_counts([&](int t) {
                    INFO(t << " threads");
                    const auto a = aggregate_sparse(plan, s);
                    REQUIRE_NOTHROW(a.validate("aggregate"));
                    CHECK(a.to_dense() == dense);
                });
            }
        }
    }
    const aggregation max_plan(g, sources, {.kind = aggregator::max, .backward = false});
    CHECK_THROWS_WITH(aggregate_sparse(max_plan, s), Catch::Contains("max aggregation of sparse rows"));
}
