#pragma once
/// @file ptscotch.hpp
/// Distributed min-cut k-way partitioning with PT-Scotch (SCOTCH_dgraphPart), for graphs
/// whose rows are spread over the ranks in contiguous slices (csr_slice), so that no rank has
/// to hold the whole graph.

#include <retexo/comm/communicator.hpp>
#include <retexo/graph/csr.hpp>

#include <cstdint>
#include <vector>

namespace retexo {

/// Settings of partition_ptscotch beyond its required arguments.
struct ptscotch_options {
    /// Load imbalance PT-Scotch may accept: every part holds at most (1 + imbalance) times
    /// the mean number of nodes (PT-Scotch's target; the result is close to it).
    double imbalance = 0.03;
    /// Run SCOTCH_dgraphCheck on the distributed graph before partitioning (collective, one
    /// more pass over the arcs with communication).  Always done in debug builds of retexo.
    bool check_graph = false;
};

/// Min-cut k-way partition of a graph distributed in contiguous row slices with PT-Scotch's
/// SCOTCH_dgraphPart.  Collective over comm.
///
/// `mine` holds rows [first_row, first_row + rows) of the in-edge CSR, columns global ids;
/// ranks hold consecutive slices in rank order that together cover all num_nodes rows
/// (row_slice gives the usual split; a rank may hold no rows).  PT-Scotch partitions the
/// symmetric graph without self loops or repeated arcs: with `directed`, every arc's
/// reverse is sent to the rank that owns its row first (an exchange counted as
/// purpose::setup); without it, the slices must already be symmetric.  Arcs and nodes are
/// unweighted.  The same seed, graph and number of ranks give the same assignment.
/// PT-Scotch's own messages go through MPI directly and are not in comm's ledger.
///
/// Every rank throws the same retexo::error (no rank is left waiting) when: parts < 1 or
/// parts > num_nodes; the slices are inconsistent (not contiguous in rank order, different
/// num_nodes, parts or directed on different ranks, a column outside [0, num_nodes)); a
/// PT-Scotch call fails (the message names it); the loaded PT-Scotch library is not the
/// 64-bit build retexo was compiled against; or the result leaves a part empty.
///
/// @param comm      the ranks holding the slices
/// @param mine      this rank's slice
/// @param directed  whether the slices hold a directed graph (to be symmetrised)
/// @param parts     number of parts, the same on every rank
/// @param seed      seeds PT-Scotch's random generator
/// @return the part of each row of `mine`, in [0, parts)
std::vector<part_t> partition_ptscotch(const mpi::communicator& comm, const csr_slice& mine, bool directed,
                                       part_t parts, std::uint64_t seed);
/// The same with explicit settings.  Collective over comm.
std::vector<part_t> partition_ptscotch(const mpi::communicator& comm, const csr_slice& mine, bool directed,
                                       part_t parts, std::uint64_t seed, const ptscotch_options& options);

} // namespace retexo
