#pragma once
/// @file load.hpp
/// Getting each rank its partition: from a partitioned directory (each rank opens only its
/// own part file), from one graph file plus a partitioning rule, or from the built-in
/// synthetic graph.  Errors on any rank are agreed on, so every rank fails together.

#include <retexo/comm/communicator.hpp>
#include <retexo/defaults.hpp>
#include <retexo/graph/generate.hpp>
#include <retexo/graph/local_partition.hpp>
#include <retexo/partition/partitioner.hpp>

namespace retexo {

struct data_options {
    /// Partitioned directory (manifest.json), graph file (.h5), or empty for the embedded
    /// default graph.
    std::string data;
    /// With a graph file or the embedded graph: random | metis | scotch | blocks | `<assignment file>`.
    std::string partition = "random";
    metis_objective objective = metis_objective::vol;
    std::uint64_t seed = defaults::seed;
    /// Scale each node's features to sum 1 (rows with a zero sum stay zero).
    bool normalize_features = defaults::normalize_features;
    /// With a graph file: false leaves the features out (lp.features empty), for a tool that
    /// streams them from the file itself (retexo_partition).
    bool read_features = true;
    csbm_options embedded = embedded_graph_options();

    /// The built-in synthetic graph used when no data is given.
    static csbm_options embedded_graph_options();
};

/// Scale each row of x by the inverse of its sum of absolute values (zero rows stay zero).
void normalize_rows(node_features& x);

/// Load this rank's partition (collective).  Partition r goes to rank r; the partition
/// count must equal the communicator size.
local_partition load_rank_partition(const mpi::communicator& comm, const data_options& options);

/// Statistics of the loaded partitions, one entry per rank, on every rank (collective).
partition_stats gather_partition_stats(const mpi::communicator& comm, const local_partition& lp);

/// Per-rank statistics of loaded partitions, gathered and formatted on every rank
/// (collective).
std::string gather_partition_table(const mpi::communicator& comm, const local_partition& lp);

} // namespace retexo
