#pragma once
/// @file partitioner.hpp
/// Node -> partition assignments: random (seeded, balanced), METIS k-way (edge-cut or
/// communication-volume objective), PT-Scotch k-way min-cut (ptscotch.hpp; distributed when
/// the graph is) and contiguous blocks, plus partition statistics.  Assignment files (line i
/// = partition of node i, as gpmetis writes them) and make_partition, which also reads the
/// given one, are in io/assignment.hpp; the hash that identifies an assignment in
/// core/hash.hpp.

#include <retexo/core/names.hpp>
#include <retexo/graph/graph.hpp>

#include <string>

namespace retexo {

enum class partition_method { random, metis, blocks, given, scotch };
enum class metis_objective { cut, vol };

constexpr name_table<partition_method, 5> names_of(partition_method)
{
    return {"partition method",
            {{{partition_method::random, "random"},
              {partition_method::metis, "metis"},
              {partition_method::blocks, "blocks"},
              {partition_method::given, "given"},
              {partition_method::scotch, "scotch"}}}};
}
constexpr name_table<metis_objective, 2> names_of(metis_objective)
{
    return {"METIS objective", {{{metis_objective::cut, "cut"}, {metis_objective::vol, "vol"}}}};
}

struct partition_options {
    partition_method method = partition_method::random;
    part_t parts = 1;
    std::uint64_t seed = 42;
    metis_objective objective = metis_objective::vol;
    std::string assignment_file; ///< for partition_method::given
};

/// Nodes per block of partition_random.
inline constexpr node_t random_partition_block = node_t{1} << 16;
/// Balanced random assignment: the ids are cut into blocks of random_partition_block, each
/// block's ids are shuffled (seeded by seed and the block's index) and the shuffled ids get
/// partitions round-robin, continuing from one block to the next; so the part sizes differ by
/// at most one, and the partition of a node depends on its id, num_nodes, parts and seed only.
std::vector<part_t> partition_random(node_t num_nodes, part_t parts, std::uint64_t seed);
/// Rows [first, first + count) of partition_random(num_nodes, parts, seed), computed from the
/// blocks they touch alone (memory: count + random_partition_block entries).
std::vector<part_t> partition_random_rows(node_t num_nodes, part_t parts, std::uint64_t seed, node_t first,
                                          node_t count);
/// Contiguous id ranges of (nearly) equal size.
std::vector<part_t> partition_blocks(node_t num_nodes, part_t parts);
/// METIS_PartGraphKway on the symmetrised graph without self loops.
std::vector<part_t> partition_metis(const csr& in_edges, bool directed, part_t parts, metis_objective objective,
                                    std::uint64_t seed);
/// Throws naming the first empty partition.
void check_no_empty_part(std::span<const part_t> assignment, part_t parts);

struct part_stats {
    node_t owned = 0;
    node_t halo = 0;        ///< distinct remote in-neighbours
    offset_t edges = 0;     ///< in-edges of owned nodes
    offset_t cut_edges = 0; ///< of which come from another partition
    node_t train = 0, valid = 0, test = 0;
};
struct partition_stats {
    std::vector<part_stats> parts;
    offset_t edge_cut = 0; ///< directed CSR entries crossing partitions
    node_t total_halo = 0; ///< replicated boundary nodes, summed over partitions
    double balance = 0;    ///< max owned / mean owned
};
partition_stats compute_partition_stats(const graph& g, std::span<const part_t> assignment, part_t parts);
partition_stats compute_partition_stats(const csr& in_edges, std::span<const split> membership,
                                        std::span<const part_t> assignment, part_t parts);
/// Human-readable table of the statistics.
std::string format_partition_stats(const partition_stats& s, bool directed);

} // namespace retexo
