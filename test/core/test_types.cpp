// all_finite: the exponent-bits test against std::isfinite, value by value.
#include <retexo/core/types.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace retexo;

TEST_CASE("all_finite agrees with std::isfinite on every kind of float", "[core]")
{
    using lim = std::numeric_limits<float>;
    const std::vector<float> finite = {
        0.0F, -0.0F, 1.0F, -2.5F, lim::max(), lim::lowest(), lim::min(), lim::denorm_min(), 1e-40F, -1e-40F};
    const std::vector<float> not_finite = {lim::infinity(), -lim::infinity(), lim::quiet_NaN(), -lim::quiet_NaN(),
                                           lim::signaling_NaN()};
    CHECK(all_finite(finite));
    CHECK(all_finite(std::span<const float>{}));
    for (const float bad : not_finite) {
        REQUIRE_FALSE(std::isfinite(bad));
        for (const std::size_t at : {std::size_t{0}, std::size_t{4}, finite.size()}) {
            auto v = finite;
            v.insert(v.begin() + static_cast<std::ptrdiff_t>(at), bad);
            INFO("value " << bad << " at " << at);
            CHECK_FALSE(all_finite(v));
        }
    }
    for (const float f : finite)
        REQUIRE(std::isfinite(f));
}
