#pragma once
/// @file partition_files.hpp
/// The partitioned form on disk (data/FORMAT.md): a directory holding manifest.json,
/// assignment.txt and one HDF5 file per partition, part<r>.h5.  A rank loading partition r
/// opens only manifest.json and part<r>.h5; nothing of another partition's features or
/// labels is read.

#include <retexo/graph/local_partition.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/partition/partitioner.hpp>

namespace retexo {

inline constexpr const char* partition_format_name = "retexo-partition";
inline constexpr std::int64_t partition_format_version = 1;

/// Contents of manifest.json.
struct partition_manifest {
    graph_info graph;
    part_t num_parts = 0;
    std::string method;    ///< random | metis | blocks | given
    std::string objective; ///< METIS objective when method == metis
    std::uint64_t seed = 0;
    std::uint64_t assignment_hash = 0;
    std::string source; ///< graph file the partitions were made from
    partition_stats stats;
};

/// Partition a graph file into out_dir (created if needed).  Features are streamed once
/// from the graph file in row blocks.  Files appear only when complete; manifest.json is
/// written last.
partition_manifest write_partitioned(const std::string& graph_path, std::span<const part_t> assignment,
                                     const partition_options& options, const std::string& out_dir);

/// Write dir/manifest.json (atomically).
void write_manifest(const std::string& dir, const partition_manifest& m);

/// Write one rank's partition as its part file (what load_partition reads back).  With
/// `features_from`, the owned nodes' features are streamed from that graph file in blocks of
/// rows instead of taken from lp.features.
void write_partition_file(const std::string& path, const local_partition& lp,
                          const graph_file_reader* features_from = nullptr);

/// Read and check dir/manifest.json.
partition_manifest read_manifest(const std::string& dir);

/// Load partition `part` from a partitioned directory, checking it against the manifest
/// (partition count, hash, shapes).
local_partition load_partition(const std::string& dir, part_t part);

/// Path of partition r's file inside dir.
std::string partition_file_path(const std::string& dir, part_t part);

} // namespace retexo
