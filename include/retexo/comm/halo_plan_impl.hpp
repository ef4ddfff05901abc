#pragma once
// Template bodies of halo_plan.hpp.

#include <retexo/kernels/common.hpp>

#include <cstring>

namespace retexo {

template <typename Src, typename Dst>
void halo_plan::forward(const Src* owned, Dst* halo, int width, purpose p) const
{
    const std::size_t row_bytes = sizeof(Dst) * static_cast<std::size_t>(width);
    const std::size_t need = row_bytes * send_rows_.size();
    if (send_buf_.size() < need) send_buf_.resize(need);
    auto* packed = reinterpret_cast<Dst*>(send_buf_.data());
    const auto rows = static_cast<std::int64_t>(send_rows_.size());
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
        const Src* src = owned + static_cast<std::ptrdiff_t>(send_rows_[i]) * width;
        Dst* dst = packed + i * width;
        for (int f = 0; f < width; ++f) dst[f] = static_cast<Dst>(load(src[f]));
    }
    exchange(send_buf_.data(), halo, send_count_, send_displ_, recv_count_, recv_displ_,
             static_cast<int>(row_bytes), p);
}

template <typename T>
void halo_plan::reverse_add(const T* halo, T* owned, int width, purpose p) const
{
    const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(width);
    const std::size_t need = row_bytes * send_rows_.size();
    if (recv_buf_.size() < need) recv_buf_.resize(need);
    // The halo block is already grouped by owner: send it as is, receive per send list.
    exchange(halo, recv_buf_.data(), recv_count_, recv_displ_, send_count_, send_displ_,
             static_cast<int>(row_bytes), p);
    const auto* in = reinterpret_cast<const T*>(recv_buf_.data());
    // Rows may repeat across peers: add peer by peer (fixed order), rows in parallel.
    for (int q = 0; q < comm_.size(); ++q) {
        const auto list = send_rows(q);
        const T* block = in + static_cast<std::ptrdiff_t>(send_displ_[q]) * width;
        const auto n = static_cast<std::int64_t>(list.size());
#pragma omp parallel for schedule(static)
        for (std::int64_t i = 0; i < n; ++i) {
            T* dst = owned + static_cast<std::ptrdiff_t>(list[i]) * width;
            const T* src = block + i * width;
            for (int f = 0; f < width; ++f) dst[f] += src[f];
        }
    }
}

}  // namespace retexo
