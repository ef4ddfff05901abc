#pragma once
/// @file graph.hpp
/// A whole attributed graph in memory, as stored in the HDF5 graph format (data/FORMAT.md).

#include <retexo/core/sparse.hpp>
#include <retexo/graph/csr.hpp>

#include <string>

namespace retexo {

/// Node classification graph: in-edge CSR, node features, labels and a train/valid/test split.
struct graph {
    std::string name;
    bool directed = false; ///< false: in_edges is symmetric
    int num_classes = 0;
    csr in_edges;                           ///< row v = sources of edges into v
    node_features features;                 ///< num_nodes x num_features (dense or sparse rows)
    std::vector<std::int32_t> labels;       ///< num_nodes entries in [0, num_classes)
    std::vector<node_t> train, valid, test; ///< sorted node ids, pairwise disjoint

    node_t num_nodes() const noexcept { return in_edges.num_rows(); }
    offset_t num_edges() const noexcept { return in_edges.num_edges(); }
    int num_features() const noexcept { return static_cast<int>(features.cols()); }
};

/// Graph-level metadata (what the HDF5 file's root attributes hold).
struct graph_info {
    std::string name;
    bool directed = false;
    node_t num_nodes = 0;
    offset_t num_edges = 0;
    int num_features = 0;
    int num_classes = 0;
};

inline graph_info info_of(const graph& g)
{
    return {g.name, g.directed, g.num_nodes(), g.num_edges(), g.num_features(), g.num_classes};
}

/// Per-node split membership from the three sorted id lists.
std::vector<split> split_membership(node_t num_nodes, std::span<const node_t> train, std::span<const node_t> valid,
                                    std::span<const node_t> test);

/// A split drawn at random with the semantics of PyTorch Geometric's Planetoid(split='random'),
/// which the RETEXO paper averages its small-graph accuracies over: for each class, train_per_class
/// random nodes of that class go to train; the other nodes are shuffled, the first num_valid
/// become valid and the next num_test test; any node left over is in no split.
struct random_split_spec {
    std::uint64_t seed = 0;
    node_t train_per_class = 20; ///< Planetoid's defaults: 20 / 500 / 1000
    node_t num_valid = 500;
    node_t num_test = 1000;
};

struct split_lists {
    std::vector<node_t> train, valid, test; ///< sorted node ids
};

/// Draw a random split (deterministic in spec.seed, platform-independent).  Throws a
/// retexo::error when a class has fewer than train_per_class nodes or num_valid + num_test
/// exceeds the nodes left after train.
split_lists random_split(std::span<const std::int32_t> labels, int num_classes, const random_split_spec& spec);

/// Check a whole graph for consistency (sizes, id ranges, label range, disjoint splits).
/// Throws a retexo::error whose message starts with `source`.
void validate_graph(const graph& g, const std::string& source);

} // namespace retexo
