#pragma once
/// @file owner_shard.hpp
/// Owner shards (data/FORMAT.md): what one data owner holds of a graph, written by that owner
/// alone and without knowing the others: its nodes (global ids, features, labels, split
/// membership) and the edges incident to them (global ids of both ends).  An owners
/// directory holds shard<r>.h5 for rank r = 0..P-1; `mpirun -np P retexo_mpi --data DIR`
/// trains with rank r opening shard<r>.h5 only.

#include <retexo/core/atomic_file.hpp>
#include <retexo/ingest/share.hpp>
#include <retexo/io/features.hpp>
#include <retexo/io/hdf5.hpp>

#include <optional>

namespace retexo {

inline constexpr const char* owner_shard_format_name = "retexo-owner-shard";
inline constexpr std::int64_t owner_shard_format_version = 1;

/// `DIR/shard<rank>.h5`.
std::string owner_shard_path(const std::string& dir, part_t rank);

/// Writes one owner shard; the features may come in row blocks (in node order), so an owner
/// never needs them all in memory.  The file appears under its name only when commit()
/// succeeds.
class owner_shard_writer {
public:
    /// info: the graph's name, directedness, feature and class counts (num_nodes and num_edges
    /// are not an owner's to know and are ignored); num_nodes: the nodes this owner holds.
    owner_shard_writer(const std::string& path, const graph_info& info, node_t num_nodes,
                       feature_storage storage = feature_storage::dense);
    ~owner_shard_writer();

    /// The owner's nodes: global ids (distinct), labels in [0, num_classes), split membership.
    void write_nodes(std::span<const node_t> ids, std::span<const std::int32_t> labels,
                     std::span<const split> membership);
    /// The edges u -> v (global ids) incident to the owner's nodes.  An undirected graph's edge
    /// may be listed in either direction, by one owner or both.
    void write_edges(std::span<const node_t> src, std::span<const node_t> dst);
    /// The next feature rows, in the order of the ids.
    void append_features(const node_features& block);
    void commit();

private:
    graph_info info_;
    node_t num_nodes_;
    atomic_file out_;
    std::optional<h5::file> file_;
    std::optional<feature_writer> features_;
    bool nodes_written_ = false, edges_written_ = false;
};

/// Write a whole shard at once (the API call for codes that link libretexo).
void write_owner_shard(const std::string& path, const node_share& nodes, std::span<const node_t> edge_src,
                       std::span<const node_t> edge_dst);

/// One shard as read: its nodes (in_edges left empty) and the edges it lists.
struct owner_shard {
    node_share nodes;
    std::vector<node_t> src, dst;
};

/// Read and check one shard file.
owner_shard read_owner_shard(const std::string& path);
/// What a shard holds, from its header and its datasets' shapes (no data read): what loading
/// it will take, before it is loaded.
struct owner_shard_extent {
    std::int64_t nodes = 0, edges = 0;
    int num_features = 0;
    bool dense = true; ///< features stored dense
};
owner_shard_extent read_owner_shard_extent(const std::string& path);
/// Read and check a shard's nodes (in_edges left empty).
node_share read_owner_shard_nodes(const std::string& path);
/// A shard's edges, read from the file in blocks of 2^20 each time they are visited (the file
/// stays open while the result lives); ids are checked as they are read.
edge_blocks read_owner_shard_edges(const std::string& path);

/// An owner's own rows as text (plain or .gz): `nodes`, one line per node,
/// `global_id,label,split,f_1,...,f_F` (split: train | valid | test | none; the label may be
/// empty for a node in no split), and `edges`, one line per edge, `src,dst` (global ids).
/// info gives the graph's name, directedness and class count; the feature count is the
/// width of the lines (all alike); features are stored as `storage` says, or by their
/// density when it is empty.
owner_shard read_owner_rows(const std::string& nodes, const std::string& edges, const graph_info& info,
                            std::optional<feature_storage> storage = {});

/// Write the owner shards of a graph file under an assignment into out_dir (shard<p>.h5 for
/// p = 0..parts-1; shard p lists the in-edges of its nodes), features streamed in row blocks:
/// to make an owners directory from one whole graph, for tests and for moving existing data
/// to owners.
void write_owner_shards(const std::string& graph_path, std::span<const part_t> assignment, part_t parts,
                        const std::string& out_dir);

} // namespace retexo
