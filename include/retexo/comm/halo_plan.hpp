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
/// and never overflow an int.  One buffer of sent rows serves forward (packing) and
/// reverse_add (receiving); it persists, and grows only when a wider payload is first
/// exchanged.  start_forward is the non-blocking form (MPI_Ialltoallv): the caller
/// computes on its owned rows while the halo rows travel.

#include <retexo/comm/communicator.hpp>
#include <retexo/core/parallel.hpp>
#include <retexo/graph/local_partition.hpp>

#include <chrono>
#include <map>
#include <vector>

namespace retexo {

/// A halo exchange in flight (halo_plan::start_forward).  Until it completes, the halo rows
/// must not be read or written, nor the plan used for another exchange.  When a slower
/// network is emulated, wait() returns no earlier than the start plus the time that network
/// would take, so work overlapped with the exchange hides that time as it would there.
class pending_exchange {
public:
    pending_exchange() = default;
    pending_exchange(pending_exchange&& o) noexcept;
    pending_exchange& operator=(pending_exchange&&) = delete;
    pending_exchange(const pending_exchange&) = delete;
    pending_exchange& operator=(const pending_exchange&) = delete;
    /// Waits if wait() was not called (errors are then swallowed: call wait()).
    ~pending_exchange();

    /// Lets MPI progress the exchange (call it between chunks of the overlapped work);
    /// true once the data has arrived.
    bool test();
    /// Completes the exchange.
    void wait();

private:
    friend class halo_plan;
    MPI_Request request_ = MPI_REQUEST_NULL;
    std::chrono::steady_clock::time_point ready_{};
};

/// Rows of varying length in bytes (e.g. sparse rows: column ids and values).
struct byte_rows {
    std::vector<std::uint8_t> data;
    std::vector<std::int64_t> offsets{0}; ///< rows + 1 byte offsets into data
    std::int64_t rows() const noexcept { return static_cast<std::int64_t>(offsets.size()) - 1; }
    std::span<const std::uint8_t> row(std::int64_t r) const noexcept
    {
        return {data.data() + offsets[r], static_cast<std::size_t>(offsets[r + 1] - offsets[r])};
    }
};

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
    void forward(const Src* owned, Dst* halo, int width, purpose p = purpose::halo_forward) const
    {
        start_forward(owned, halo, width, p).wait();
    }
    /// Non-blocking forward (collective): packs the owned rows and starts the exchange; the
    /// halo rows are valid after the returned exchange's wait().  Owned rows may be read
    /// meanwhile; the bytes are counted at the start.
    template <typename Src, typename Dst>
    [[nodiscard]] pending_exchange start_forward(const Src* owned, Dst* halo, int width,
                                                 purpose p = purpose::halo_forward) const;

    /// Forward of rows of varying length (collective): every owned row of `owned` (num_owned
    /// rows) travels to the peers that hold it as a halo row.  The rows' lengths cross first
    /// (4 bytes per row sent, blocking); on return halo.offsets are set and the rows' bytes
    /// are in flight into halo.data, valid after the returned exchange's wait().  Both steps
    /// are counted under p.
    [[nodiscard]] pending_exchange start_forward_rows(const byte_rows& owned, byte_rows& halo,
                                                      purpose p = purpose::halo_forward) const;

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
        release(send_buf_);
        release(recv_buf_);
    }

    const mpi::communicator& comm() const noexcept { return comm_; }

private:
    MPI_Datatype row_type(int bytes) const;
    /// Starts an MPI_Ialltoallv of rows (the counts must outlive it) and counts its bytes.
    pending_exchange start(const void* send, void* recv, const std::vector<int>& scount, const std::vector<int>& sdispl,
                           const std::vector<int>& rcount, const std::vector<int>& rdispl, int row_bytes,
                           purpose p) const;
    void exchange(const void* send, void* recv, const std::vector<int>& scount, const std::vector<int>& sdispl,
                  const std::vector<int>& rcount, const std::vector<int>& rdispl, int row_bytes, purpose p) const
    {
        start(send, recv, scount, sdispl, rcount, rdispl, row_bytes, p).wait();
    }

    const mpi::communicator& comm_;
    node_t num_owned_ = 0;
    node_t num_halo_ = 0;
    std::vector<node_t> send_rows_;            // concatenated per peer
    std::vector<node_t> send_global_;          // their global ids
    std::vector<node_t> halo_global_;          // global id of every halo row
    std::vector<int> send_count_, send_displ_; // in rows
    std::vector<int> recv_count_, recv_displ_; // in rows (halo rows, grouped by owner)
    mutable std::vector<std::byte> send_buf_, recv_buf_;
    mutable std::vector<int> bytes_scount_, bytes_sdispl_, bytes_rcount_, bytes_rdispl_; // start_forward_rows
    mutable std::map<int, MPI_Datatype> types_; // row bytes -> contiguous datatype
};

} // namespace retexo

#include <retexo/comm/halo_plan_impl.hpp>
