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

/// The per-row scale of int8 rows: max |x| / 127.
inline float int8_scale(const float* x, std::int64_t n) noexcept
{
    float m = 0;
    for (std::int64_t f = 0; f < n; ++f)
        m = std::max(m, std::fabs(x[f]));
    return m / 127.0F;
}

/// x / s rounded to the nearest int8 value in [-127, 127]; inv = 1 / s (0 when s is 0).
inline float int8_quantize(float x, float inv) noexcept
{
    return std::clamp(std::nearbyint(x * inv), -127.0F, 127.0F);
}

inline float int8_inverse(float s) noexcept
{
    return s > 0 ? 1.0F / s : 0.0F;
}

/// How the values of a row cross the network: 4 bytes (fp32), 2 (bf16) or 1 (int8, the row
/// led by its float scale, as quantize_int8 packs it).  Every value a receiver reads below
/// fp32 is kept as bf16 (int8: the dequantised value rounded to bf16), and the sender rounds
/// its own copy alike (round()).
struct wire_format {
    int value_bytes = 4;

    bool scaled() const noexcept { return value_bytes == 1; }
    /// Bytes in front of a row's values.
    int row_header() const noexcept { return scaled() ? static_cast<int>(sizeof(float)) : 0; }
    /// Bytes of a dense row of `width` values.
    std::int64_t dense_row_bytes(std::int64_t width) const noexcept { return row_header() + width * value_bytes; }
    /// The scale of a row's values (0 unless scaled()).
    float scale(const float* x, std::int64_t n) const noexcept { return scaled() ? int8_scale(x, n) : 0.0F; }
    /// The value a receiver reads for x in a row of scale s.
    float round(float x, float s) const noexcept
    {
        if (value_bytes == 4) return x;
        if (value_bytes == 2) return static_cast<float>(bf16(x));
        return static_cast<float>(bf16(s * int8_quantize(x, int8_inverse(s))));
    }
};

/// out (rows x int8_row_bytes(width)) = the packed rows of x (rows x width, row-major).
inline void quantize_int8(const float* x, std::int64_t rows, int width, std::uint8_t* out)
{
    check_finite("quantize_int8", "input", x, static_cast<std::size_t>(rows) * width);
    const int w = int8_row_bytes(width);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * width;
        std::uint8_t* o = out + r * w;
        const float s = int8_scale(xr, width);
        const float inv = int8_inverse(s);
        std::memcpy(o, &s, sizeof s);
        for (int f = 0; f < width; ++f) {
            const auto q = static_cast<std::int8_t>(int8_quantize(xr[f], inv));
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
