#pragma once
/// @file communicator.hpp
/// Thin MPI wrappers: the environment, a communicator that counts every byte it moves by
/// purpose (ledger.hpp), typed collectives, and the error agreement that keeps one rank's
/// failure from leaving the others waiting in a collective.
///
/// Every member function marked "collective" must be called by all ranks of the communicator.

#include <retexo/comm/ledger.hpp>
#include <retexo/core/error.hpp>

#include <mpi.h>

#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

/// Check the return code of an MPI call.
#define RETEXO_CHECK_MPI(call)                                                                                         \
    do {                                                                                                               \
        const int retexo_rc_ = (call);                                                                                 \
        if (retexo_rc_ != MPI_SUCCESS) {                                                                               \
            char retexo_buf_[MPI_MAX_ERROR_STRING];                                                                    \
            int retexo_len_ = 0;                                                                                       \
            MPI_Error_string(retexo_rc_, retexo_buf_, &retexo_len_);                                                   \
            RETEXO_THROW(#call << " failed: " << std::string(retexo_buf_, retexo_len_));                               \
        }                                                                                                              \
    } while (false)

namespace retexo::mpi {

/// A retexo::error that every rank of a communicator raised together (after agree()), so
/// the job can end cleanly instead of aborting.
class agreed_error : public error {
public:
    using error::error;
};

} // namespace retexo::mpi

/// RETEXO_ENSURE for a condition every rank evaluates on the same (global) values, so every
/// rank fails together: it throws an mpi::agreed_error, which ends the job without MPI_Abort.
#define RETEXO_ENSURE_AGREED(cond, msg_stream)                                                                         \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::ostringstream retexo_msg_;                                                                            \
            retexo_msg_ << msg_stream; /* NOLINT(bugprone-macro-parentheses): as in RETEXO_THROW */                    \
            throw ::retexo::mpi::agreed_error(retexo_msg_.str(), __FILE__, __LINE__);                                  \
        }                                                                                                              \
    } while (false)

namespace retexo::mpi {

/// MPI datatype of T.
template <typename T>
MPI_Datatype datatype()
{
    if constexpr (std::is_same_v<T, float>)
        return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>)
        return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, char>)
        return MPI_CHAR;
    else if constexpr (std::is_same_v<T, std::int8_t>)
        return MPI_INT8_T;
    else if constexpr (std::is_same_v<T, std::uint8_t>)
        return MPI_UINT8_T;
    else if constexpr (std::is_same_v<T, std::int32_t>)
        return MPI_INT32_T;
    else if constexpr (std::is_same_v<T, std::int64_t>)
        return MPI_INT64_T;
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        return MPI_UINT64_T;
    else if constexpr (std::is_same_v<T, std::uint16_t> || (sizeof(T) == 2 && std::is_trivially_copyable_v<T>))
        return MPI_UINT16_T; // uint16_t, or bf16 bits
    else
        static_assert(sizeof(T) == 0, "retexo::mpi::datatype: unsupported type");
}

/// MPI_Init_thread / MPI_Finalize for the lifetime of the object (FUNNELED: only the
/// main thread calls MPI; OpenMP threads compute).
class environment {
public:
    environment(int& argc, char**& argv);
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    ~environment();
};

/// A communicator that borrows an MPI_Comm and owns a byte ledger.
class communicator {
public:
    explicit communicator(MPI_Comm comm = MPI_COMM_WORLD);

    MPI_Comm get() const noexcept { return comm_; }
    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }

    byte_ledger& ledger() const noexcept { return ledger_; }
    /// Record a communication call's bytes (and, when a network is emulated, wait as long as
    /// that network would take to carry them).
    void charge(purpose p, std::uint64_t sent, std::uint64_t received, std::uint64_t msgs = 0) const;
    /// Emulate a slower network on every following call (this rank only; set it on all).
    void emulate(const network_model& m) noexcept { network_ = m; }
    const network_model& network() const noexcept { return network_; }
    /// Sum a per-rank ledger (e.g. the traffic of one phase) over all ranks (collective;
    /// counted as control traffic).
    byte_ledger sum(const byte_ledger& mine) const;
    /// Sum of every rank's whole ledger (collective).
    byte_ledger total_ledger() const { return sum(ledger_); }

    /// Collective.
    void barrier() const;
    /// How many of this communicator's ranks share this rank's node (its memory), by
    /// MPI_Comm_split_type, and of those, how many passed the same `group` (a memory cgroup's
    /// path, say) as this rank (collective; no bytes counted).
    std::pair<int, int> ranks_on_node(const std::string& group = {}) const;
    /// A barrier that waits without a busy core: it polls a non-blocking barrier every
    /// millisecond (ranks done early, while others still compute, leave them the cores).
    void idle_barrier() const;

    /// In-place all-reduce (collective).
    template <typename T>
    void allreduce(std::span<T> data, MPI_Op op, purpose p) const;
    template <typename T>
    T allreduce(T value, MPI_Op op, purpose p) const
    {
        allreduce(std::span<T>(&value, 1), op, p);
        return value;
    }
    /// Broadcast from root (collective).
    template <typename T>
    void broadcast(std::span<T> data, int root, purpose p) const;
    void broadcast(std::string& s, int root, purpose p) const;
    /// Gather one value from every rank onto every rank (collective).
    template <typename T>
    std::vector<T> allgather(T value, purpose p) const;
    /// Gather variable-length pieces onto every rank, concatenated in rank order (collective).
    template <typename T>
    std::vector<T> allgatherv(std::span<const T> mine, purpose p) const;
    /// Exchange one count per peer (collective).
    std::vector<int> alltoall(std::span<const int> send_counts, purpose p) const;
    /// MPI_Alltoallv with precomputed counts/displacements in elements (collective).
    template <typename T>
    void alltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv, const int* recv_counts,
                   const int* recv_displs, purpose p) const;
    /// Send `send[send_offsets[r] .. send_offsets[r+1])` to rank r and receive what every
    /// rank sends to this one, concatenated in rank order (collective).  send_offsets has
    /// size() + 1 entries; `received_from`, if given, gets the size() + 1 offsets of each
    /// source rank's block in the result.
    template <typename T>
    std::vector<T> exchange(std::span<const T> send, std::span<const std::int64_t> send_offsets, purpose p,
                            std::vector<std::int64_t>* received_from = nullptr) const;

    /// Error agreement (collective): every rank passes its local error message (empty if
    /// none).  If any rank failed, every rank throws the same retexo::error naming the first
    /// failing rank, so no rank is left waiting in a later collective.
    void agree(const std::string& local_error, purpose p = purpose::control) const;
    /// What a successful agree(…, p) adds to the ledger: so that a checkpoint, committed by
    /// one, can count its own commit in the traffic it records.
    byte_ledger agreement_charge(purpose p) const;

    /// Run f() (which must not call collectives on this communicator) and agree on success
    /// (collective): an exception on any rank is rethrown on every rank.
    template <typename F>
    void checked(F&& f) const
    {
        std::string err;
        try {
            f();
        } catch (const std::exception& e) {
            err = e.what();
            if (err.empty()) err = "unknown error";
        }
        agree(err);
    }

private:
    MPI_Comm comm_;
    int rank_ = 0;
    int size_ = 1;
    mutable byte_ledger ledger_;
    network_model network_;
};

/// Refuses, on every rank together, a step this rank's node cannot hold before it allocates:
/// `bytes` is a lower bound of what the step takes on this rank, `what` names it and the
/// options or file that size it.  Checked against this rank's share of its memory room
/// (available_memory()): the node's available memory over the ranks on the node, or a memory
/// cgroup's room over the ranks on the node in that cgroup (one per rank, as a launcher may
/// set, or one for the job), whichever is less; where that is unknown, nothing is refused.
/// Collective (one communicator::agree(), setup traffic).
void ensure_memory(const communicator& comm, double bytes, const std::string& what);

} // namespace retexo::mpi

#include <retexo/comm/communicator_impl.hpp>
