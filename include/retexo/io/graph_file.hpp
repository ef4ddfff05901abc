#pragma once
/// @file graph_file.hpp
/// The HDF5 graph format (specified in data/FORMAT.md): reading and streaming writing.

#include <retexo/core/atomic_file.hpp>
#include <retexo/graph/generate.hpp>
#include <retexo/graph/graph.hpp>
#include <retexo/io/features.hpp>
#include <retexo/io/hdf5.hpp>

#include <functional>
#include <memory>
#include <optional>

namespace retexo {

inline constexpr const char* graph_format_name = "retexo-graph";
inline constexpr std::int64_t graph_format_version = 1;

/// Writes a graph file in pieces (structure first, then feature row blocks in order) so a
/// generator or converter never holds all features in memory.  The file appears under its
/// final name only when commit() succeeds.
class graph_file_writer {
public:
    /// Features are stored dense or sparse (io/features.hpp), whatever the blocks given.
    graph_file_writer(const std::string& path, const graph_info& info,
                      feature_storage storage = feature_storage::dense);
    /// Write into `file`, created empty by the caller (e.g. h5::file::create_in_memory), who
    /// keeps it: commit() checks completeness and flushes, and `file` stays open.
    graph_file_writer(h5::file& file, const graph_info& info, feature_storage storage = feature_storage::dense);
    ~graph_file_writer();

    /// Write the CSR, labels and the split; sizes must match the info given at construction.
    void write_structure(const csr& in_edges, std::span<const std::int32_t> labels, std::span<const node_t> train,
                         std::span<const node_t> valid, std::span<const node_t> test);
    /// Append the next feature rows.
    void append_features(const node_features& block);
    /// Check completeness, close and move the file into place.
    void commit();

private:
    void write_header(feature_storage storage);
    graph_info info_;
    std::optional<atomic_file> out_;   ///< a file of our own, moved into place on commit()
    std::optional<h5::file> own_file_; ///< that file, open
    h5::file* file_ = nullptr;         ///< the file written (own_file_ or the caller's)
    std::optional<feature_writer> features_;
    bool structure_written_ = false;
};

/// Write a whole in-memory graph.
void write_graph(const graph& g, const std::string& path);

/// Random access to a graph file: metadata, structure, and feature rows by hyperslab.
class graph_file_reader {
public:
    explicit graph_file_reader(const std::string& path); ///< checks layout and shapes
    /// A graph file already open, e.g. a file image in memory (h5::file::open_image); the
    /// same checks, messages naming file.path().
    explicit graph_file_reader(h5::file file);

    const graph_info& info() const noexcept { return info_; }
    const std::string& path() const noexcept { return file_.path(); }

    csr read_csr() const; ///< validated
    /// The in-edges of rows [row0, row0 + rows) (offsets rebased to 0), validated.
    csr read_csr_rows(node_t row0, node_t rows) const;
    /// The CSR offsets of rows [row0, row0 + rows) (rows + 1 of them, rebased to 0), validated:
    /// the rows' in-degrees without their edges.
    std::vector<offset_t> read_csr_offsets(node_t row0, node_t rows) const;
    /// Labels of rows [row0, row0 + rows), validated.
    std::vector<std::int32_t> read_labels(node_t row0, node_t rows) const;
    std::vector<std::int32_t> read_labels() const;                  ///< validated against num_classes
    std::vector<node_t> read_split(const std::string& which) const; ///< train|valid|test
    /// Every node's split membership, from the three split lists.
    std::vector<split> read_membership() const;
    /// Feature rows [row0, row0 + rows), stored as the file stores them.
    node_features read_features(node_t row0, node_t rows) const;
    feature_storage storage() const noexcept { return features_->storage(); }
    /// The feature rows of the given nodes (ascending ids), read in blocks of rows: f gets
    /// each block's rows of `ids`, in order (so a writer can stream them).
    void for_feature_rows(std::span<const node_t> ids, const std::function<void(const node_features&)>& f) const;
    /// One pass over every feature row in blocks: f(p, rows) gets, block after block, the rows
    /// of the block whose nodes `assignment` gives to part p (in node order).
    void route_feature_rows(std::span<const part_t> assignment, part_t parts,
                            const std::function<void(part_t, const node_features&)>& f) const;
    /// The feature rows of the given nodes (ascending ids), stored as the file stores them.
    node_features read_feature_rows(std::span<const node_t> ids) const;

private:
    /// read_csr_offsets without the rebase.
    std::vector<offset_t> absolute_offsets(node_t row0, node_t rows) const;
    h5::file file_;
    graph_info info_;
    std::optional<feature_reader> features_;
};

/// Read a whole graph (features in row blocks) and validate it.
graph read_graph(const std::string& path);
/// The same from an open reader (e.g. of a file image in memory).
graph read_graph(const graph_file_reader& reader);

/// Stream a synthetic graph (graph/generate.hpp) into an HDF5 graph file, features written
/// in row blocks, so that memory stays that of the structure whatever the feature size.
graph_info generate_csbm_file(const csbm_options& options, const std::string& path);

} // namespace retexo
