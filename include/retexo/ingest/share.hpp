#pragma once
/// @file share.hpp
/// The loading pipeline, from what a rank holds to its partition, in three steps that every
/// source of data goes through (ingest/load.hpp picks the source):
///
///   1. read my share: a node_share, the nodes this rank holds (an owner shard, a slice of a
///      graph file, the rows of a partitioned directory's part file);
///   2. find owners: a node_directory over every rank's nodes (for a slice of a whole graph,
///      its rows' partitions, and move_nodes() sends each row's structure to its partition);
///   3. plan halos: assemble_partition() asks the directory who owns each in-neighbour and
///      builds the local numbering, halo and CSR of local_partition.hpp.
///
/// Nothing but structure (ids, degrees, in-edges) crosses between ranks: features, labels and
/// splits stay where they were read.

#include <retexo/graph/local_partition.hpp>
#include <retexo/ingest/directory.hpp>

#include <functional>

namespace retexo {

/// The nodes one rank holds before it has its partition.
struct node_share {
    std::string source;               ///< where it was read (named in errors)
    graph_info info;                  ///< name, directed, num_features, num_classes
    std::vector<node_t> nodes;        ///< global ids, distinct, any order
    node_features features;           ///< one row per node, in `nodes` order
    std::vector<std::int32_t> labels; ///< per node
    std::vector<split> membership;    ///< per node
    csr in_edges;                     ///< row i: every source of an edge into nodes[i] (global ids)

    node_t size() const noexcept { return static_cast<node_t>(nodes.size()); }
};

/// Collective: check that every rank's share describes the same graph (name, directedness,
/// feature count, class count; feature storage may differ) and that its arrays agree in
/// size.  Returns the graph's info with num_nodes = the number of nodes of all shares.
graph_info agree_on_graph(const mpi::communicator& comm, const node_share& mine);

/// The in-edge rows of the nodes a rank holds, for move_nodes() to read block by block instead
/// of holding them all: their offsets (one per node + 1, from 0), and rows(first, count), the
/// in-edges of nodes [first, first + count) with offsets from 0 (read from a file, say).
struct row_source {
    std::vector<offset_t> offsets{0};
    std::function<csr(node_t first, node_t count)> rows;

    /// Rows in memory (each block read is a copy of its rows).
    static row_source of(csr g);
};

/// Collective: move node nodes[i] and its in-edges (row i of `in_edges`) to rank dest[i].  The
/// result holds the nodes and in-edges every rank sent here, in rank order and each sender's
/// order (no features, labels or splits: the receiver reads its own).  The rows go in blocks
/// of consecutive nodes with at most `block_edges` in-edges (or one row with more), one
/// exchange a block, so that a rank holds the rows it receives and, beside them, one block
/// three times (as read, ordered by destination, received): never all of its rows twice.  A
/// block that cannot be read, or whose rows disagree with the offsets, is an error on every
/// rank.
node_share move_nodes(const mpi::communicator& comm, std::span<const node_t> nodes, const row_source& in_edges,
                      std::span<const part_t> dest, offset_t block_edges = offset_t{1} << 22);

/// Put the share's nodes in ascending global id order, and every per-node array (and the
/// in-edge rows, when there are as many) with them; sort each in-edge row.
void sort_by_id(node_share& s);

/// Edges u -> v (global ids) that can be read more than once: each call of for_each calls
/// visit(src, dst) for consecutive blocks of them, the same blocks every call, so that a
/// loader can read them from a file block by block instead of holding them all.
struct edge_blocks {
    using visitor = std::function<void(std::span<const node_t> src, std::span<const node_t> dst)>;
    std::function<void(const visitor&)> for_each;

    /// Edges in memory, as one block (the spans must outlive the result).
    static edge_blocks of(std::span<const node_t> src, std::span<const node_t> dst);
};

/// Collective: turn the edges each rank knows into the complete in-edge lists of its own nodes
/// (`nodes`, ascending).  An edge u -> v (global ids; for an undirected graph both u -> v and
/// v -> u) goes to the owner of v, found in `dir`; repeated edges count once; self loops are
/// dropped; rows come out ascending.  Every edge must touch a node of `nodes`, else the error
/// names `source`.  Reads the edges two to five times instead of holding them: to count; to
/// send the arcs into other ranks' nodes to their owners, unless every such arc is listed by
/// its owner already (a keyed hash summed over the arcs listed into each rank's nodes from
/// other ranks', less its sum over the arcs to send, cancels over all ranks: shards that list
/// every in-edge of their nodes, as retexo_shard writes them, send no arc); to fill the rows
/// with the arcs as listed; a fourth to find the reverses the rows lack, unless the edges are
/// all arcs into `nodes` and those between two of them are listed both ways (a hash sum over
/// the rows tells); and a fifth where the rows lack arcs, to add them.  Memory, besides
/// O(nodes) and an N-bit map: the arcs sent and those received as 8-byte words (where they
/// are sent), then the rows as listed (4 bytes an arc) beside the words received; and where
/// the rows lack arcs (an undirected edge listed one way only, an arc only another rank
/// lists), the rows with them beside the rows without.  A different reading of the edges is
/// an error on every rank.
csr gather_in_edges(const mpi::communicator& comm, const node_directory& dir, std::span<const node_t> nodes,
                    const edge_blocks& edges, bool directed, const std::string& source);

/// Collective: this rank's partition from its share (nodes it owns, complete in-edges) and the
/// directory of owners of all shares: owned rows ascending by global id, halo grouped by
/// owner, CSR rows ascending by global source id (local_partition.hpp's numbering, the one
/// the partitioned directory stores).
local_partition assemble_partition(const mpi::communicator& comm, node_share share, node_directory& dir);

} // namespace retexo
