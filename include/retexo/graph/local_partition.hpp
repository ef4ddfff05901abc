#pragma once
/// @file local_partition.hpp
/// What one rank owns of a partitioned graph: its nodes (global ids, features, labels, split
/// membership), their in-edges in local numbering, and its halo, the remote in-neighbours.
///
/// Local numbering: rows [0, num_owned) are the owned nodes in ascending global id; rows
/// [num_owned, num_owned + num_halo) are the halo nodes, grouped by owning partition
/// (ascending) and ascending global id within a group, so a halo exchange receives each
/// peer's rows into one contiguous block.  Each CSR row lists its sources in ascending
/// *global* id, as the whole graph's CSR does, so per-row reductions see the same order on
/// every partitioning.

#include <retexo/graph/graph.hpp>

namespace retexo {

/// The local structure of one partition (everything but features, labels and splits).
struct partition_structure {
    std::vector<node_t> owned_global; ///< ascending
    csr in_edges;                     ///< num_owned rows; columns in [0, num_owned + num_halo)
    std::vector<node_t> halo_global;
    std::vector<part_t> halo_owner;       ///< ascending
    std::vector<offset_t> halo_in_degree; ///< global in-degree of each halo node

    node_t num_owned() const noexcept { return static_cast<node_t>(owned_global.size()); }
    node_t num_halo() const noexcept { return static_cast<node_t>(halo_global.size()); }
};

/// One rank's partition, loaded.
struct local_partition : partition_structure {
    part_t part = 0;
    part_t num_parts = 1;
    std::uint64_t assignment_hash = 0;
    graph_info global;                ///< whole-graph metadata
    node_features features;           ///< num_owned x num_features (dense or sparse rows)
    std::vector<std::int32_t> labels; ///< num_owned
    std::vector<split> membership;    ///< num_owned
    std::string source;               ///< where it was loaded from, for messages (may be empty)

    node_t num_local() const noexcept { return num_owned() + num_halo(); }
    /// Local ids of owned nodes in split s, ascending.
    std::vector<node_t> nodes_in(split s) const;
};

/// Build the local structure of partition `part` from the global in-edge CSR.
partition_structure build_partition_structure(const csr& global, std::span<const part_t> assignment, part_t part);

/// Slice a whole in-memory graph (for tests and the embedded default).
local_partition extract_partition(const graph& g, std::span<const part_t> assignment, part_t num_parts, part_t part);

} // namespace retexo
