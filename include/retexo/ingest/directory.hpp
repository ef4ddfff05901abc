#pragma once
/// @file directory.hpp
/// A distributed directory of node owners.  The ids [0, num_nodes) are ranged to the ranks in
/// contiguous slices (row_slice): rank d keeps the owner, and one per-node value such as the
/// in-degree, of the ids in its slice.  Every rank registers the ids it owns; afterwards any
/// rank can ask for the owner of any id.  Queries and answers travel by MPI_Alltoallv, so no
/// rank ever holds an array over all nodes.

#include <retexo/comm/communicator.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/graph/csr.hpp>

#include <string>

namespace retexo {

class node_directory {
public:
    /// Collective.  `owned` are the ids this rank owns (any order).  Throws on every rank if
    /// an id is outside [0, num_nodes) or two ranks claim one id; `who` names this rank's
    /// source of ids in the message (e.g. its shard file).  With num_nodes equal to the sum of
    /// the ranks' counts (as the loaders pass), that also means every id has an owner.
    node_directory(const mpi::communicator& comm, node_t num_nodes, std::span<const node_t> owned,
                   const std::string& who);

    /// Collective: the directory of an assignment given slice by slice: `owner_of_slice` holds
    /// the owner of each id in this rank's row_slice (as a rank holding that slice of a whole
    /// graph computes it).  Throws on every rank if an owner is outside [0, size).
    node_directory(const mpi::communicator& comm, node_t num_nodes, std::span<const part_t> owner_of_slice);

    node_t num_nodes() const noexcept { return n_; }

    /// Collective: the owner of each id (ids in [0, num_nodes); throws otherwise).
    std::vector<part_t> owners(std::span<const node_t> ids) const;
    /// Collective: set each owned id's value (`owned` as registered, any subset order).
    void set_values(std::span<const node_t> owned, std::span<const offset_t> values);
    /// Collective: the values set for the given ids.
    std::vector<offset_t> values(std::span<const node_t> ids) const;

    /// Collective: assignment_hash (partitioner.hpp) of the owner array, fed slice after slice
    /// in rank order: the same value as hashing the whole assignment on one rank.
    std::uint64_t assignment_hash() const;

private:
    node_directory(const mpi::communicator& comm, node_t num_nodes);
    /// Rank that keeps id v.
    int keeper(node_t v) const;
    /// Ids sent to their keepers, grouped by keeper.
    struct routed {
        std::vector<node_t> received;            ///< the ids this rank keeps that were asked for
        std::vector<std::int64_t> received_from; ///< size + 1 offsets of each sender's block
        std::vector<std::int64_t> sent_offsets;  ///< size + 1 offsets of each keeper's block sent
        std::vector<std::int64_t> sent_order;    ///< for each id sent, its index in the ids given
    };
    routed send_to_keepers(std::span<const node_t> ids) const;
    /// Look each id up in a table over this rank's slice and return the answers in `ids`'s order.
    template <typename T>
    std::vector<T> lookup(std::span<const node_t> ids, const std::vector<T>& table) const;

    const mpi::communicator* comm_;
    node_t n_ = 0;
    std::vector<node_t> first_;   ///< size + 1 slice boundaries
    std::vector<part_t> owner_;   ///< of the ids in this rank's slice
    std::vector<offset_t> value_; ///< of the ids in this rank's slice
};

} // namespace retexo
