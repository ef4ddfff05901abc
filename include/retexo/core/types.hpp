#pragma once
/// @file types.hpp
/// Index and matrix types used across libretexo.

#include <Eigen/Core>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace retexo {

/// Global or local node id.  Graphs are limited to 2^31 - 1 nodes.
using node_t = std::int32_t;
/// Edge offsets in CSR arrays (64-bit: graphs may hold more than 2^31 edges).
using offset_t = std::int64_t;
/// Partition / rank id.
using part_t = std::int32_t;

/// Row-major dense matrix: rows are contiguous feature vectors.
template <typename T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using row_vector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

using matrix_f = matrix<float>;
using vector_f = vector<float>;

/// A named tensor (saved models, checkpoints).
struct named_tensor {
    std::string name;
    matrix_f value;
};

/// Frees a container's storage (`v = {}` would not: it assigns an empty list, and the
/// capacity stays).
template <typename C>
void release(C& c) noexcept
{
    c = C(); // move-assigned from an empty container: the old storage goes
}

/// Whether every value is finite (no NaN, no infinity): a test of the exponent bits that
/// vectorises (Eigen's allFinite compares x - x with itself, twenty times slower).
inline bool all_finite(std::span<const float> v) noexcept
{
    std::uint32_t bad = 0;
    for (const float f : v)
        bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(f) & 0x7f800000U) == 0x7f800000U);
    return bad == 0;
}

/// Membership of a node in the train / valid / test split.
enum class split : std::int8_t { none = 0, train = 1, valid = 2, test = 3 };

} // namespace retexo
