#pragma once
/// @file ogb.hpp
/// Reader for the OGB node-property-prediction raw layout (../shared/datasets/FORMAT.md):
/// `raw/{edge,node-feat,node-label,num-node-list,num-edge-list}.csv[.gz]` and
/// `split/<name>/{train,valid,test}.csv[.gz]`.  Every file is streamed through zlib.
/// The binary layout of OGB's binary=True datasets (ogbn-papers100M) is read too when
/// raw/data.npz is present: data.npz holds edge_index (2, E), node_feat (N, F) float16/32/64,
/// num_nodes_list and num_edges_list; raw/node-label.npz holds node_label (N, 1), where NaN
/// marks a node without a label (stored as 0; it must be in no split).

#include <retexo/graph/graph.hpp>
#include <retexo/io/features.hpp>

#include <map>
#include <optional>

namespace retexo {

struct ogb_options {
    std::string split;                             ///< split name; empty: the only split present
    std::optional<random_split_spec> random_split; ///< draw the split instead of reading split/
    std::optional<bool> directed;                  ///< overrides meta.json; default undirected
    int num_classes = 0;                           ///< 0: meta.json, else max label + 1
    std::string name;                              ///< graph name; empty: meta.json or the directory name
    /// How the features are stored; empty: by the density of the first block of rows
    /// (sparse below sparse_density_limit).
    std::optional<feature_storage> features;
};

/// What a conversion saw and did.
struct ogb_report {
    graph_info info;
    std::string split;
    offset_t edge_lines = 0;
    offset_t self_loops_dropped = 0;
    offset_t duplicates_dropped = 0;
    std::size_t train = 0, valid = 0, test = 0;
    std::size_t unlabelled = 0; ///< binary layout: nodes whose label is NaN (in no split)
    feature_storage storage = feature_storage::dense;
    double density = 0; ///< of the features' first block of rows
};

/// Convert an OGB raw directory into an HDF5 graph file, streaming the features (memory is
/// the CSR plus one block of feature rows; the CSV layout also holds the edge list, the binary
/// layout reads edge_index twice instead).  The output appears only on success.
ogb_report convert_ogb(const std::string& dir, const std::string& out_path, const ogb_options& options = {});

/// Split names present under dir/split.
std::vector<std::string> ogb_splits(const std::string& dir);

/// An OGB raw directory held in memory: its files' contents by path relative to it
/// ("raw/edge.csv", "raw/data.npz", "split/s/train.csv", "meta.json", ...).  `name` stands for
/// the directory in error messages (its files are name/raw/edge.csv, ...) and names the graph
/// as a directory's name does.
struct ogb_memory_dir {
    std::string name = "memory";
    std::map<std::string, std::string> files;
};

/// convert_ogb on a directory held in memory, the graph file made in memory too: `image`
/// receives its bytes (h5::file::open_image reads them).  Nothing touches the disk, and the
/// files are read by the same code as a directory's (tests, fuzzing).
ogb_report convert_ogb(const ogb_memory_dir& dir, std::vector<char>& image, const ogb_options& options = {});

} // namespace retexo
