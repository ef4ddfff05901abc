#pragma once
/// @file graph_file.hpp
/// The HDF5 graph format (specified in data/FORMAT.md): reading and streaming writing.

#include <retexo/core/atomic_file.hpp>
#include <retexo/graph/graph.hpp>
#include <retexo/io/hdf5.hpp>

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
    graph_file_writer(const std::string& path, const graph_info& info);
    ~graph_file_writer();

    /// Write the CSR, labels and the split; sizes must match the info given at construction.
    void write_structure(const csr& in_edges, std::span<const std::int32_t> labels, std::span<const node_t> train,
                         std::span<const node_t> valid, std::span<const node_t> test);
    /// Append `rows` feature rows (row-major, rows * num_features floats).
    void append_features(const float* data, node_t rows);
    /// Check completeness, close and move the file into place.
    void commit();

private:
    graph_info info_;
    atomic_file out_;
    std::optional<h5::file> file_;
    h5::handle features_;
    node_t rows_written_ = 0;
    bool structure_written_ = false;
};

/// Write a whole in-memory graph.
void write_graph(const graph& g, const std::string& path);

/// Random access to a graph file: metadata, structure, and feature rows by hyperslab.
class graph_file_reader {
public:
    explicit graph_file_reader(const std::string& path); ///< checks layout and shapes

    const graph_info& info() const noexcept { return info_; }
    const std::string& path() const noexcept { return file_.path(); }

    csr read_csr() const;                                           ///< validated
    std::vector<std::int32_t> read_labels() const;                  ///< validated against num_classes
    std::vector<node_t> read_split(const std::string& which) const; ///< train|valid|test
    /// Feature rows [row0, row0 + rows) into out (rows * num_features floats).
    void read_features(node_t row0, node_t rows, float* out) const;

private:
    h5::file file_;
    h5::handle features_;
    graph_info info_;
};

/// Read a whole graph (features in row blocks) and validate it.
graph read_graph(const std::string& path);

} // namespace retexo
