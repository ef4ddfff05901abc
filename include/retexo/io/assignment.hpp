#pragma once
/// @file assignment.hpp
/// Assignment files (line i = the partition of node i; plain or gzip text), and the
/// assignment a partition_options describes: computed by a partitioner
/// (partition/partitioner.hpp) or, for partition_method::given, read from its file.

#include <retexo/partition/partitioner.hpp>

#include <span>
#include <string>
#include <vector>

namespace retexo {

/// Read an assignment file (plain or .gz; one partition id per line) and check its length
/// equals num_nodes and every id is in [0, parts).
std::vector<part_t> read_assignment(const std::string& path, node_t num_nodes, part_t parts);
/// Entries [first, first + count) of an assignment file, streamed: the whole file is checked
/// (num_nodes lines, ids in [0, parts)) but only those entries are kept.
std::vector<part_t> read_assignment(const std::string& path, node_t num_nodes, part_t parts, node_t first,
                                    node_t count);
/// The same on an assignment held in memory, plain or gzip text (tests, fuzzing): `name`
/// stands for the file in messages, and the text goes through the same code as a file's.
std::vector<part_t> read_assignment(const std::string& name, std::span<const char> bytes, node_t num_nodes,
                                    part_t parts, node_t first, node_t count);
/// Write an assignment file atomically.
void write_assignment(const std::string& path, std::span<const part_t> assignment);
/// Dispatch on options.method (scotch: PT-Scotch in this process alone).  Throws if any
/// partition would be empty.
std::vector<part_t> make_partition(const csr& in_edges, bool directed, const partition_options& options);

} // namespace retexo
