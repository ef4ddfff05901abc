#pragma once
/// @file quantize.hpp
/// int8 rows with a per-row scale, for data sent between ranks.
///
/// A packed row is 4 bytes of float scale s = max_f |x_f| / 127 followed by `width` int8
/// values q_f = round(x_f / s), so |x_f - s q_f| <= s / 2 = max|x| / 254.  Rows travel as
/// plain bytes (width + 4 per row), a quarter of fp32 and about half of bf16.

#include <retexo/kernels/common.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace retexo {

/// Bytes of one packed row.
constexpr int int8_row_bytes(int width) noexcept
{
    return width + static_cast<int>(sizeof(float));
}

/// out (rows x int8_row_bytes(width)) = the packed rows of x (rows x width, row-major).
inline void quantize_int8(const float* x, std::int64_t rows, int width, std::uint8_t* out)
{
    check_finite("quantize_int8", "input", x, static_cast<std::size_t>(rows) * width);
    const int w = int8_row_bytes(width);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * width;
        std::uint8_t* o = out + r * w;
        float m = 0;
        for (int f = 0; f < width; ++f)
            m = std::max(m, std::fabs(xr[f]));
        const float s = m / 127.0F;
        const float inv = s > 0 ? 1.0F / s : 0.0F;
        std::memcpy(o, &s, sizeof s);
        for (int f = 0; f < width; ++f) {
            const auto q = static_cast<std::int8_t>(std::clamp(std::nearbyint(xr[f] * inv), -127.0F, 127.0F));
            std::memcpy(o + sizeof s + f, &q, 1);
        }
    }
}

/// out (rows x width) = the values of packed rows (rows x int8_row_bytes(width)).
template <typename T>
void dequantize_int8(const std::uint8_t* in, std::int64_t rows, int width, T* out)
{
    const int w = int8_row_bytes(width);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint8_t* p = in + r * w;
        float s;
        std::memcpy(&s, p, sizeof s);
        T* o = out + r * width;
        for (int f = 0; f < width; ++f) {
            std::int8_t q;
            std::memcpy(&q, p + sizeof s + f, 1);
            o[f] = static_cast<T>(s * static_cast<float>(q));
        }
    }
}

} // namespace retexo
