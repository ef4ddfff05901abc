#pragma once
/// @file halo_plan.hpp
/// The halo exchange of one partition, planned once and reused for every layer and epoch.
///
/// Built by a collective constructor from the partition's halo (global id and owner of
/// every remote in-neighbour): each rank tells each owner which of its rows it needs (the
/// only time ids cross the network), and the owner records them as send lists.  After
/// that only payload moves:
///   forward      owned rows -> the peers' halo rows (one MPI_Alltoallv);
///   reverse_add  halo-row gradients -> back to their owners, added into the owned rows in
///                a fixed order (peers by rank, rows by send list).
/// Rows travel as one MPI datatype each (contiguous width x T), so counts are row counts
/// and never overflow an int.  Send and receive buffers persist; they grow only when a
/// wider payload is first exchanged.

#include <retexo/comm/communicator.hpp>
#include <retexo/graph/local_partition.hpp>

#include <map>
#include <vector>

namespace retexo {

class halo_plan {
public:
    /// Collective.  Throws (on every rank) if a requested node is not owned by the rank the
    /// partition names.
    halo_plan(const mpi::communicator& comm, const partition_structure& p);
    ~halo_plan();
    halo_plan(const halo_plan&) = delete;
    halo_plan& operator=(const halo_plan&) = delete;

    node_t num_owned() const noexcept { return num_owned_; }
    node_t num_halo() const noexcept { return num_halo_; }
    /// Rows this rank sends per exchange (sum over peers, with repetition).
    std::int64_t num_send_rows() const noexcept { return send_rows_.size(); }
    /// Owned rows sent to peer q.
    std::span<const node_t> send_rows(int q) const
    {
        return {send_rows_.data() + send_displ_[q], static_cast<std::size_t>(send_count_[q])};
    }
    /// Number of peers this rank receives halo rows from.
    int num_sources() const noexcept;

    /// Forward (collective): halo (num_halo x width) receives the peers' owned rows from
    /// owned (num_owned x width, row-major).  Src and Dst may differ (e.g. float -> bf16).
    template <typename Src, typename Dst>
    void forward(const Src* owned, Dst* halo, int width, purpose p = purpose::halo_forward) const;

    /// Reverse (collective): the halo rows' values (num_halo x width) are sent to their
    /// owners and added into owned (num_owned x width).
    template <typename T>
    void reverse_add(const T* halo, T* owned, int width, purpose p = purpose::halo_backward) const;

    /// Boundary node sampling (BNS-GCN): only rows whose global id passes keep() travel,
    /// multiplied by `scale` (1/p keeps the aggregation unbiased); the other halo rows are
    /// set to zero.  Both sides evaluate keep() on global ids, so no ids are sent.
    /// Collective.
    template <typename T, typename Keep>
    void forward_sampled(const T* owned, T* halo, int width, Keep&& keep, T scale,
                         purpose p = purpose::halo_forward) const;
    /// The matching reverse: the kept halo rows' values (times scale) are added into owners.
    template <typename T, typename Keep>
    void reverse_add_sampled(const T* halo, T* owned, int width, Keep&& keep, T scale,
                             purpose p = purpose::halo_backward) const;

    /// Frees the persistent send and receive buffers; the next exchange allocates them again.
    /// For callers that exchange once and then compute for long (a RETEXO stage).
    void release_buffers() const
    {
        send_buf_ = {};
        recv_buf_ = {};
    }

    const mpi::communicator& comm() const noexcept { return comm_; }

private:
    MPI_Datatype row_type(int bytes) const;
    void exchange(const void* send, void* recv, const std::vector<int>& scount, const std::vector<int>& sdispl,
                  const std::vector<int>& rcount, const std::vector<int>& rdispl, int row_bytes, purpose p) const;

    const mpi::communicator& comm_;
    node_t num_owned_ = 0;
    node_t num_halo_ = 0;
    std::vector<node_t> send_rows_;            // concatenated per peer
    std::vector<node_t> send_global_;          // their global ids
    std::vector<node_t> halo_global_;          // global id of every halo row
    std::vector<int> send_count_, send_displ_; // in rows
    std::vector<int> recv_count_, recv_displ_; // in rows (halo rows, grouped by owner)
    mutable std::vector<std::byte> send_buf_, recv_buf_;
    mutable std::map<int, MPI_Datatype> types_; // row bytes -> contiguous datatype
};

} // namespace retexo

#include <retexo/comm/halo_plan_impl.hpp>
