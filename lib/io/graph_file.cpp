// The HDF5 graph file: streaming writer, reader of slices and of the whole graph.
#include <retexo/graph/generate.hpp>
#include <retexo/io/graph_file.hpp>

#include <algorithm>

namespace retexo {

namespace {
std::string shape_string(const std::vector<hsize_t>& dims)
{
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i)
        s += (i > 0 ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}
} // namespace

graph_file_writer::graph_file_writer(const std::string& path, const graph_info& info, feature_storage storage)
    : info_(info), out_(std::in_place, path)
{
    RETEXO_ENSURE(info.num_nodes >= 0 && info.num_features >= 0 && info.num_classes > 0,
                  path << ": invalid graph sizes (nodes " << info.num_nodes << ", features " << info.num_features
                       << ", classes " << info.num_classes << ")");
    own_file_.emplace(h5::file::create(out_->temp_path(), path));
    file_ = &*own_file_;
    write_header(storage);
}

graph_file_writer::graph_file_writer(h5::file& file, const graph_info& info, feature_storage storage)
    : info_(info), file_(&file)
{
    RETEXO_ENSURE(info.num_nodes >= 0 && info.num_features >= 0 && info.num_classes > 0,
                  file.path() << ": invalid graph sizes (nodes " << info.num_nodes << ", features " << info.num_features
                              << ", classes " << info.num_classes << ")");
    write_header(storage);
}

void graph_file_writer::write_header(feature_storage storage)
{
    const graph_info& info = info_;
    file_->set_attr("retexo_format", std::string(graph_format_name));
    file_->set_attr("format_version", graph_format_version);
    file_->set_attr("name", info.name);
    file_->set_attr("num_nodes", static_cast<std::int64_t>(info.num_nodes));
    file_->set_attr("num_edges", static_cast<std::int64_t>(info.num_edges));
    file_->set_attr("num_features", static_cast<std::int64_t>(info.num_features));
    file_->set_attr("num_classes", static_cast<std::int64_t>(info.num_classes));
    file_->set_attr("directed", static_cast<std::int64_t>(info.directed ? 1 : 0));
    features_.emplace(*file_, "features", info.num_nodes, info.num_features, storage);
}

graph_file_writer::~graph_file_writer() = default;

void graph_file_writer::write_structure(const csr& in_edges, std::span<const std::int32_t> labels,
                                        std::span<const node_t> train, std::span<const node_t> valid,
                                        std::span<const node_t> test)
{
    const auto& p = file_->path();
    RETEXO_ENSURE(in_edges.num_rows() == info_.num_nodes,
                  p << ": CSR has " << in_edges.num_rows() << " rows, expected " << info_.num_nodes);
    RETEXO_ENSURE(in_edges.num_edges() == info_.num_edges,
                  p << ": CSR has " << in_edges.num_edges() << " edges, expected " << info_.num_edges);
    RETEXO_ENSURE(static_cast<node_t>(labels.size()) == info_.num_nodes,
                  p << ": " << labels.size() << " labels for " << info_.num_nodes << " nodes");
    file_->write<offset_t>("csr/offsets", in_edges.offsets);
    file_->write<node_t>("csr/sources", in_edges.sources);
    file_->write<std::int32_t>("labels", labels);
    file_->write<node_t>("split/train", train);
    file_->write<node_t>("split/valid", valid);
    file_->write<node_t>("split/test", test);
    structure_written_ = true;
}

void graph_file_writer::append_features(const node_features& block)
{
    features_->append(block);
}

void graph_file_writer::commit()
{
    RETEXO_ENSURE(structure_written_, file_->path() << ": graph structure was never written");
    features_->finish(); // checks that every row came
    features_.reset();
    if (!out_) { // the caller's file: flushed (not after an object failed to close: see h5::file)
        RETEXO_ENSURE(!h5::close_failed.exchange(false) && H5Fflush(file_->id(), H5F_SCOPE_GLOBAL) >= 0,
                      file_->path() << ": cannot write all of the file (no space left on the device?)");
        return;
    }
    file_ = nullptr;
    own_file_->close();
    own_file_.reset();
    out_->commit();
}

void write_graph(const graph& g, const std::string& path)
{
    graph_file_writer w(path, info_of(g), g.features.is_sparse() ? feature_storage::sparse : feature_storage::dense);
    w.write_structure(g.in_edges, g.labels, g.train, g.valid, g.test);
    w.append_features(g.features);
    w.commit();
}

graph_file_reader::graph_file_reader(const std::string& path) : graph_file_reader(h5::file::open(path)) {}

graph_file_reader::graph_file_reader(h5::file file) : file_(std::move(file))
{
    const std::string& path = file_.path();
    RETEXO_ENSURE(file_.has_attr("retexo_format") && file_.attr_string("retexo_format") == graph_format_name,
                  path << ": not a retexo graph file (attribute retexo_format != " << graph_format_name << ")");
    const auto version = file_.attr_int("format_version");
    RETEXO_ENSURE(version == graph_format_version, path << ": graph format version " << version
                                                        << " is not supported (expected " << graph_format_version
                                                        << ")");
    info_.name = file_.attr_string("name");
    const auto n = file_.attr_int("num_nodes");
    RETEXO_ENSURE(n >= 0 && n < (std::int64_t{1} << 31), path << ": num_nodes " << n << " outside [0, 2^31)");
    info_.num_nodes = static_cast<node_t>(n);
    info_.num_edges = file_.attr_int("num_edges");
    RETEXO_ENSURE(info_.num_edges >= 0, path << ": num_edges " << info_.num_edges << " is negative");
    auto count = [&](const char* name) { // a positive int, read whole (not wrapped into range)
        const std::int64_t v = file_.attr_int(name);
        RETEXO_ENSURE(v > 0 && v < (std::int64_t{1} << 31), path << ": " << name << " " << v << " outside [1, 2^31)");
        return static_cast<int>(v);
    };
    info_.num_features = count("num_features");
    info_.num_classes = count("num_classes");
    info_.directed = file_.attr_int("directed") != 0;

    const auto od = file_.dims("csr/offsets");
    RETEXO_ENSURE(od.size() == 1 && od[0] == static_cast<hsize_t>(n) + 1,
                  path << ": dataset csr/offsets must have num_nodes + 1 = " << n + 1 << " entries");
    const auto sd = file_.dims("csr/sources");
    RETEXO_ENSURE(sd.size() == 1 && sd[0] == static_cast<hsize_t>(info_.num_edges),
                  path << ": dataset csr/sources must have num_edges = " << info_.num_edges << " entries");
    const auto ld = file_.dims("labels");
    RETEXO_ENSURE(ld.size() == 1 && ld[0] == static_cast<hsize_t>(n),
                  path << ": dataset labels must be 1-D with num_nodes = " << n << " entries, has shape "
                       << shape_string(ld));
    features_.emplace(file_, "features", n, info_.num_features, feature_row_names{.noun = "node"});
}

namespace {
/// A graph file's CSR rows (global rows row0.. of `g`) are strictly ascending and hold no
/// self loop, as FORMAT.md says: duplicate edges or self loops would change every aggregation.
void check_rows_simple(const csr& g, node_t row0, const std::string& path)
{
    for (std::size_t v = 0; v + 1 < g.offsets.size(); ++v) {
        const node_t node = row0 + static_cast<node_t>(v);
        for (auto e = g.offsets[v]; e < g.offsets[v + 1]; ++e) {
            const node_t u = g.sources[static_cast<std::size_t>(e)];
            RETEXO_ENSURE(u != node, path << ": node " << node << " has a self loop (csr/sources holds none)");
            RETEXO_ENSURE(e == g.offsets[v] || g.sources[static_cast<std::size_t>(e) - 1] < u,
                          path << ": the in-edges of node " << node << " are not strictly ascending (source "
                               << g.sources[static_cast<std::size_t>(e) - 1] << " before " << u
                               << "; csr/sources holds no duplicate edges)");
        }
    }
}
} // namespace

csr graph_file_reader::read_csr() const
{
    csr g;
    g.offsets = file_.read_vector<offset_t>("csr/offsets", info_.num_nodes + 1);
    g.sources = file_.read_vector<node_t>("csr/sources", info_.num_edges);
    validate_csr(g, info_.num_nodes, file_.path());
    check_rows_simple(g, 0, file_.path());
    if (!info_.directed) { // symmetric: each node the source of as many edges as it has in-edges
        std::vector<offset_t> out(static_cast<std::size_t>(info_.num_nodes), 0);
        for (node_t u : g.sources)
            ++out[static_cast<std::size_t>(u)];
        for (node_t v = 0; v < info_.num_nodes; ++v)
            RETEXO_ENSURE(out[static_cast<std::size_t>(v)] == g.degree(v),
                          file_.path() << ": the graph is undirected, but node " << v << " has " << g.degree(v)
                                       << " in-edges and is the source of " << out[static_cast<std::size_t>(v)]
                                       << " edges");
    }
    return g;
}

std::vector<offset_t> graph_file_reader::absolute_offsets(node_t row0, node_t rows) const
{
    RETEXO_ENSURE(row0 >= 0 && rows >= 0 && row0 + static_cast<std::int64_t>(rows) <= info_.num_nodes,
                  file_.path() << ": rows " << row0 << ".." << row0 + rows << " are outside the graph's "
                               << info_.num_nodes << " nodes");
    std::vector<offset_t> offsets(static_cast<std::size_t>(rows) + 1);
    file_.read_rows<offset_t>(file_.open_dataset("csr/offsets"), "csr/offsets", static_cast<hsize_t>(row0),
                              static_cast<hsize_t>(rows) + 1, 1, offsets.data());
    // The checks of validate_csr on the slice, named by global row and edge: a slice's first
    // and last offsets are shared with its neighbours, so the slices together check the whole.
    const auto& path = file_.path();
    const offset_t first = offsets.front();
    RETEXO_ENSURE(row0 > 0 || first == 0, path << ": CSR offsets must start at 0");
    RETEXO_ENSURE(row0 + static_cast<std::int64_t>(rows) < info_.num_nodes || offsets.back() == info_.num_edges,
                  path << ": CSR offsets end at " << offsets.back() << " but there are " << info_.num_edges
                       << " edges");
    RETEXO_ENSURE(first >= 0 && first <= info_.num_edges, path << ": csr/offsets[" << row0 << "] = " << first
                                                               << " is outside [0, num_edges = " << info_.num_edges
                                                               << "]");
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
        RETEXO_ENSURE(offsets[i] <= offsets[i + 1],
                      path << ": CSR offsets decrease at row " << row0 + static_cast<std::int64_t>(i));
    RETEXO_ENSURE(offsets.back() <= info_.num_edges, path << ": csr/offsets[" << row0 + rows << "] = " << offsets.back()
                                                          << " is outside [0, num_edges = " << info_.num_edges << "]");
    return offsets;
}

namespace {
/// Offsets made to start at 0; the first offset they had.
offset_t rebase(std::vector<offset_t>& offsets)
{
    const offset_t first = offsets.front();
    for (auto& o : offsets)
        o -= first;
    return first;
}
} // namespace

std::vector<offset_t> graph_file_reader::read_csr_offsets(node_t row0, node_t rows) const
{
    auto offsets = absolute_offsets(row0, rows);
    rebase(offsets);
    return offsets;
}

csr graph_file_reader::read_csr_rows(node_t row0, node_t rows) const
{
    csr g;
    g.offsets = absolute_offsets(row0, rows);
    const auto& path = file_.path();
    const offset_t first = rebase(g.offsets);
    g.sources.resize(static_cast<std::size_t>(g.offsets.back()));
    if (!g.sources.empty())
        file_.read_rows<node_t>(file_.open_dataset("csr/sources"), "csr/sources", static_cast<hsize_t>(first),
                                g.sources.size(), 1, g.sources.data());
    for (std::size_t e = 0; e < g.sources.size(); ++e)
        RETEXO_ENSURE(g.sources[e] >= 0 && g.sources[e] < info_.num_nodes,
                      path << ": edge " << first + static_cast<offset_t>(e) << " has source id " << g.sources[e]
                           << " outside [0, " << info_.num_nodes << ")");
    check_rows_simple(g, row0, path);
    return g;
}

namespace {
void check_labels(std::span<const std::int32_t> labels, node_t row0, int classes, const std::string& path)
{
    for (std::size_t v = 0; v < labels.size(); ++v)
        RETEXO_ENSURE(labels[v] >= 0 && labels[v] < classes, path << ": label " << labels[v] << " of node "
                                                                  << row0 + static_cast<node_t>(v) << " is outside 0.."
                                                                  << classes - 1);
}
} // namespace

std::vector<std::int32_t> graph_file_reader::read_labels() const
{
    auto labels = file_.read_vector<std::int32_t>("labels", info_.num_nodes);
    check_labels(labels, 0, info_.num_classes, file_.path());
    return labels;
}

std::vector<std::int32_t> graph_file_reader::read_labels(node_t row0, node_t rows) const
{
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    if (rows > 0)
        file_.read_rows<std::int32_t>(file_.open_dataset("labels"), "labels", static_cast<hsize_t>(row0),
                                      static_cast<hsize_t>(rows), 1, labels.data());
    check_labels(labels, row0, info_.num_classes, file_.path());
    return labels;
}

std::vector<node_t> graph_file_reader::read_split(const std::string& which) const
{
    auto ids = file_.read_vector<node_t>("split/" + which);
    for (node_t v : ids)
        RETEXO_ENSURE(v >= 0 && v < info_.num_nodes, file_.path() << ": split/" << which << " has node id " << v
                                                                  << " outside [0, " << info_.num_nodes << ")");
    return ids;
}

std::vector<split> graph_file_reader::read_membership() const
{
    return split_membership(info_.num_nodes, read_split("train"), read_split("valid"), read_split("test"));
}

node_features graph_file_reader::read_features(node_t row0, node_t rows) const
{
    return features_->read(row0, rows);
}

void graph_file_reader::for_feature_rows(std::span<const node_t> ids,
                                         const std::function<void(const node_features&)>& f) const
{
    constexpr node_t block_rows = 1 << 15;
    std::vector<node_t> keep;
    for (std::size_t next = 0; next < ids.size();) {
        const node_t row0 = ids[next] / block_rows * block_rows;
        const node_t rows = std::min(block_rows, info_.num_nodes - row0);
        keep.clear();
        for (; next < ids.size() && ids[next] < row0 + rows; ++next) {
            RETEXO_ENSURE(ids[next] >= row0 && (keep.empty() || ids[next] - row0 > keep.back()),
                          "retexo::graph_file_reader::for_feature_rows: ids must be ascending");
            keep.push_back(ids[next] - row0);
        }
        f(read_features(row0, rows).select_rows(keep));
    }
}

void graph_file_reader::route_feature_rows(std::span<const part_t> assignment, part_t parts,
                                           const std::function<void(part_t, const node_features&)>& f) const
{
    constexpr node_t block_rows = 1 << 15;
    std::vector<std::vector<node_t>> rows_of(static_cast<std::size_t>(parts));
    for (node_t row = 0; row < info_.num_nodes; row += block_rows) {
        const node_t rows = std::min(block_rows, info_.num_nodes - row);
        const auto block = read_features(row, rows);
        for (auto& r : rows_of)
            r.clear();
        for (node_t r = 0; r < rows; ++r)
            rows_of[static_cast<std::size_t>(assignment[row + r])].push_back(r);
        for (part_t p = 0; p < parts; ++p)
            if (!rows_of[static_cast<std::size_t>(p)].empty())
                f(p, block.select_rows(rows_of[static_cast<std::size_t>(p)]));
    }
}

node_features graph_file_reader::read_feature_rows(std::span<const node_t> ids) const
{
    const auto n = static_cast<Eigen::Index>(ids.size());
    if (storage() == feature_storage::sparse) {
        csr_matrix out(0, info_.num_features);
        for_feature_rows(ids, [&](const node_features& block) {
            const auto& b = block.sparse();
            for (std::int64_t i = 0; i < b.rows; ++i)
                out.push_row(b.row_indices(i), b.row_values(i));
        });
        return out;
    }
    matrix_f out(n, info_.num_features);
    Eigen::Index at = 0;
    for_feature_rows(ids, [&](const node_features& block) {
        out.middleRows(at, block.rows()) = block.dense();
        at += block.rows();
    });
    return out;
}

graph read_graph(const std::string& path)
{
    return read_graph(graph_file_reader(path));
}

graph read_graph(const graph_file_reader& r)
{
    const std::string& path = r.path();
    graph g;
    const auto& info = r.info();
    g.name = info.name;
    g.directed = info.directed;
    g.num_classes = info.num_classes;
    g.in_edges = r.read_csr();
    g.labels = r.read_labels();
    g.train = r.read_split("train");
    g.valid = r.read_split("valid");
    g.test = r.read_split("test");
    g.features = r.read_features(0, info.num_nodes);
    validate_graph(g, path);
    return g;
}

graph_info generate_csbm_file(const csbm_options& options, const std::string& path)
{
    const csbm_generator gen(options);
    auto info = gen.info();
    graph_file_writer writer(path, info);
    writer.write_structure(gen.in_edges(), gen.labels(), gen.train(), gen.valid(), gen.test());
    constexpr node_t block = 1 << 15;
    for (node_t row = 0; row < options.nodes; row += block) {
        const node_t rows = std::min(block, options.nodes - row);
        matrix_f x(rows, options.features);
        gen.feature_rows(row, rows, x.data());
        writer.append_features(x);
    }
    writer.commit();
    return info;
}

} // namespace retexo
