#pragma once
// Template bodies of halo_plan.hpp, which includes this file at its end: include halo_plan.hpp, not this.

#include <retexo/core/bf16.hpp>

#include <cstring>

namespace retexo {

template <typename Src, typename Dst>
pending_exchange halo_plan::start_forward(const Src* owned, Dst* halo, int width, purpose p) const
{
    const std::size_t row_bytes = sizeof(Dst) * static_cast<std::size_t>(width);
    const std::size_t need = row_bytes * send_rows_.size();
    if (send_buf_.size() < need) send_buf_.resize(need);
    auto* packed = reinterpret_cast<Dst*>(send_buf_.data());
    const auto rows = static_cast<std::int64_t>(send_rows_.size());
#pragma omp parallel for schedule(static) if (worth_threads(rows * width))
    for (std::int64_t i = 0; i < rows; ++i) {
        const Src* src = owned + static_cast<std::ptrdiff_t>(send_rows_[i]) * width;
        Dst* dst = packed + i * width;
        for (int f = 0; f < width; ++f)
            dst[f] = static_cast<Dst>(load(src[f]));
    }
    return start(send_buf_.data(), halo, send_count_, send_displ_, recv_count_, recv_displ_,
                 static_cast<int>(row_bytes), p);
}

template <typename T>
void halo_plan::reverse_add(const T* halo, T* owned, int width, purpose p) const
{
    const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(width);
    const std::size_t need = row_bytes * send_rows_.size();
    // The halo block is already grouped by owner: send it as is, receive per send list, into
    // the forward's packing buffer (the same rows; no exchange is in flight meanwhile).
    if (send_buf_.size() < need) send_buf_.resize(need);
    exchange(halo, send_buf_.data(), recv_count_, recv_displ_, send_count_, send_displ_, static_cast<int>(row_bytes),
             p);
    const auto* in = reinterpret_cast<const T*>(send_buf_.data());
    // Rows may repeat across peers: add peer by peer (fixed order), rows in parallel.
    for (int q = 0; q < comm_.size(); ++q) {
        const auto list = send_rows(q);
        const T* block = in + static_cast<std::ptrdiff_t>(send_displ_[q]) * width;
        const auto n = static_cast<std::int64_t>(list.size());
#pragma omp parallel for schedule(static) if (worth_threads(n * width))
        for (std::int64_t i = 0; i < n; ++i) {
            T* dst = owned + static_cast<std::ptrdiff_t>(list[i]) * width;
            const T* src = block + i * width;
            for (int f = 0; f < width; ++f)
                dst[f] += src[f];
        }
    }
}

template <typename T, typename Keep>
void halo_plan::forward_sampled(const T* owned, T* halo, int width, Keep&& keep, T scale, purpose p) const
{
    const int P = comm_.size();
    std::vector<int> sc(static_cast<std::size_t>(P), 0), sd(static_cast<std::size_t>(P), 0),
        rc(static_cast<std::size_t>(P), 0), rd(static_cast<std::size_t>(P), 0);
    std::vector<node_t> rows;
    for (int q = 0; q < P; ++q) {
        for (int i = send_displ_[q]; i < send_displ_[q] + send_count_[q]; ++i)
            if (keep(send_global_[i])) {
                rows.push_back(send_rows_[i]);
                ++sc[q];
            }
        for (int h = recv_displ_[q]; h < recv_displ_[q] + recv_count_[q]; ++h)
            rc[q] += keep(halo_global_[h]) ? 1 : 0;
        if (q > 0) {
            sd[q] = sd[q - 1] + sc[q - 1];
            rd[q] = rd[q - 1] + rc[q - 1];
        }
    }
    const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(width);
    const std::size_t rtotal = static_cast<std::size_t>(rd[P - 1]) + static_cast<std::size_t>(rc[P - 1]);
    if (send_buf_.size() < row_bytes * rows.size()) send_buf_.resize(row_bytes * rows.size());
    if (recv_buf_.size() < row_bytes * rtotal) recv_buf_.resize(row_bytes * rtotal);
    auto* packed = reinterpret_cast<T*>(send_buf_.data());
    for (std::size_t i = 0; i < rows.size(); ++i)
        for (int f = 0; f < width; ++f)
            packed[i * width + f] = owned[static_cast<std::ptrdiff_t>(rows[i]) * width + f] * scale;
    exchange(send_buf_.data(), recv_buf_.data(), sc, sd, rc, rd, static_cast<int>(row_bytes), p);
    const auto* in = reinterpret_cast<const T*>(recv_buf_.data());
    std::size_t next = 0;
    for (node_t h = 0; h < num_halo_; ++h) {
        T* dst = halo + static_cast<std::ptrdiff_t>(h) * width;
        if (keep(halo_global_[h]))
            std::copy_n(in + (next++) * width, width, dst);
        else
            std::fill(dst, dst + width, T(0));
    }
}

template <typename T, typename Keep>
void halo_plan::reverse_add_sampled(const T* halo, T* owned, int width, Keep&& keep, T scale, purpose p) const
{
    const int P = comm_.size();
    std::vector<int> sc(static_cast<std::size_t>(P), 0), sd(static_cast<std::size_t>(P), 0),
        rc(static_cast<std::size_t>(P), 0), rd(static_cast<std::size_t>(P), 0);
    std::vector<node_t> kept_halo, dest;
    for (int q = 0; q < P; ++q) {
        for (int h = recv_displ_[q]; h < recv_displ_[q] + recv_count_[q]; ++h)
            if (keep(halo_global_[h])) {
                kept_halo.push_back(h);
                ++sc[q];
            }
        for (int i = send_displ_[q]; i < send_displ_[q] + send_count_[q]; ++i)
            if (keep(send_global_[i])) {
                dest.push_back(send_rows_[i]);
                ++rc[q];
            }
        if (q > 0) {
            sd[q] = sd[q - 1] + sc[q - 1];
            rd[q] = rd[q - 1] + rc[q - 1];
        }
    }
    const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(width);
    if (send_buf_.size() < row_bytes * kept_halo.size()) send_buf_.resize(row_bytes * kept_halo.size());
    if (recv_buf_.size() < row_bytes * dest.size()) recv_buf_.resize(row_bytes * dest.size());
    auto* packed = reinterpret_cast<T*>(send_buf_.data());
    for (std::size_t i = 0; i < kept_halo.size(); ++i)
        for (int f = 0; f < width; ++f)
            packed[i * width + f] = halo[static_cast<std::ptrdiff_t>(kept_halo[i]) * width + f] * scale;
    exchange(send_buf_.data(), recv_buf_.data(), sc, sd, rc, rd, static_cast<int>(row_bytes), p);
    const auto* in = reinterpret_cast<const T*>(recv_buf_.data());
    for (std::size_t i = 0; i < dest.size(); ++i) // peers in rank order: a fixed order
        for (int f = 0; f < width; ++f)
            owned[static_cast<std::ptrdiff_t>(dest[i]) * width + f] += in[i * width + f];
}

} // namespace retexo
