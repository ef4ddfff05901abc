#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/kernels/quantize.hpp>

using namespace retexo;
using test::random_matrix;

TEST_CASE("int8 rows with a per-row scale stay within max|row| / 254", "[kernels][quantize]")
{
    matrix_f x = random_matrix(300, 37, 4).cast<float>();
    x.row(5).setZero(); // all-zero row: scale 0, values 0
    x.row(7) *= 1e-30F; // tiny row: still scaled to its own range
    x(9, 3) = 1e6F;     // one large value dominates its row only
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(x.rows()) * int8_row_bytes(37));
    quantize_int8(x.data(), x.rows(), 37, packed.data());
    matrix_f y(x.rows(), 37);
    dequantize_int8(packed.data(), x.rows(), 37, y.data());
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
        const float m = x.row(r).cwiseAbs().maxCoeff();
        INFO("row " << r);
        CHECK((x.row(r) - y.row(r)).cwiseAbs().maxCoeff() <= m / 254.0F * 1.0001F);
        CHECK(y.row(r).cwiseAbs().maxCoeff() == Approx(m).epsilon(1e-6)); // the row maximum survives
    }
    CHECK(y.row(5).isZero(0));
    CHECK((x - y).cwiseAbs().maxCoeff() > 0.0F); // int8 really was used
    matrix<bf16> yb(x.rows(), 37);
    dequantize_int8(packed.data(), x.rows(), 37, yb.data());
    CHECK(((yb.cast<float>() - y).cwiseAbs().array() <= y.cwiseAbs().array() * (1.0F / 256)).all());
}

TEST_CASE("int8 quantization rejects non-finite input when checking is on", "[kernels][quantize][bad-input]")
{
    set_check_numerics(true);
    matrix_f x = matrix_f::Ones(2, 3);
    x(1, 2) = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::uint8_t> packed(2 * static_cast<std::size_t>(int8_row_bytes(3)));
    CHECK_THROWS_WITH(quantize_int8(x.data(), 2, 3, packed.data()), Catch::Contains("quantize_int8"));
    set_check_numerics(false);
}

TEST_CASE("wire_format: its bytes and rounding are the packers'", "[kernels][quantize]")
{
    const matrix_f x = random_matrix(20, 37, 5).cast<float>();
    const wire_format fp32{.value_bytes = 4}, half{.value_bytes = 2}, int8{.value_bytes = 1};
    CHECK(fp32.dense_row_bytes(37) == 4 * 37);
    CHECK(half.dense_row_bytes(37) == 2 * 37);
    CHECK(int8.dense_row_bytes(37) == int8_row_bytes(37));
    CHECK_FALSE(half.scaled());
    // int8: what a receiver reads is the dequantised value kept as bf16, as dequantize_int8
    // into bf16 rows gives it; bf16: the value rounded to bf16; fp32: the value.
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(x.rows()) * int8_row_bytes(37));
    quantize_int8(x.data(), x.rows(), 37, packed.data());
    matrix<bf16> yb(x.rows(), 37);
    dequantize_int8(packed.data(), x.rows(), 37, yb.data());
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
        const float s = int8.scale(x.row(r).data(), 37);
        float packed_scale = 0;
        std::memcpy(&packed_scale, packed.data() + r * int8_row_bytes(37), sizeof packed_scale);
        CHECK(s == packed_scale);
        CHECK(fp32.scale(x.row(r).data(), 37) == 0.0F);
        for (Eigen::Index f = 0; f < 37; ++f) {
            CHECK(int8.round(x(r, f), s) == static_cast<float>(yb(r, f)));
            CHECK(half.round(x(r, f), 0) == static_cast<float>(bf16(x(r, f))));
            CHECK(fp32.round(x(r, f), 0) == x(r, f));
        }
    }
}
