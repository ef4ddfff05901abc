// The OGB raw layout (CSV or binary .npz) converted to an HDF5 graph file, streaming.
#include <retexo/io/graph_file.hpp>
#include <retexo/io/npz.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/text_reader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace fs = std::filesystem;

namespace retexo {

namespace {

/// Where a dataset directory's files are read: the file system, or memory (an
/// ogb_memory_dir: paths under its name map to its files).  Everything else is the same code.
class dataset_files {
public:
    dataset_files() = default; ///< the file system
    explicit dataset_files(const ogb_memory_dir& memory) : memory_(&memory) {}

    bool exists(const fs::path& p) const { return memory_ == nullptr ? fs::exists(p) : find(p) != nullptr; }
    bool is_directory(const fs::path& p) const
    {
        if (memory_ == nullptr) return fs::is_directory(p);
        const std::string rel = relative(p);
        if (rel.empty()) return p.lexically_normal() == fs::path(memory_->name).lexically_normal();
        return std::any_of(memory_->files.begin(), memory_->files.end(),
                           [&](const auto& f) { return f.first.starts_with(rel + "/"); });
    }
    /// Names of the directories in directory p, sorted.
    std::vector<std::string> subdirectories(const fs::path& p) const
    {
        std::vector<std::string> names;
        if (memory_ == nullptr) {
            for (const auto& entry : fs::directory_iterator(p))
                if (entry.is_directory()) names.push_back(entry.path().filename().string());
        } else {
            const std::string rel = relative(p);
            const std::string prefix = rel.empty() ? "" : rel + "/";
            for (const auto& [name, bytes] : memory_->files)
                if (name.starts_with(prefix) && name.find('/', prefix.size()) != std::string::npos)
                    names.push_back(name.substr(prefix.size(), name.find('/', prefix.size()) - prefix.size()));
        }
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        return names;
    }
    std::unique_ptr<std::istream> open(const fs::path& p) const
    {
        if (memory_ == nullptr) return std::make_unique<std::ifstream>(p);
        const std::string* bytes = find(p);
        RETEXO_ENSURE(bytes != nullptr, p.string() << ": cannot open: " << std::strerror(ENOENT));
        return std::make_unique<std::istringstream>(*bytes);
    }
    text_reader text(const std::string& path) const
    {
        if (memory_ == nullptr) return text_reader(path);
        return text_reader(path, bytes(path));
    }
    npz_array_reader npz(const std::string& path, const std::string& array) const
    {
        if (memory_ == nullptr) return npz_array_reader(path, array);
        return npz_array_reader(path, bytes(path), array);
    }

private:
    /// p relative to the memory directory ("" for the directory itself).
    std::string relative(const fs::path& p) const
    {
        const std::string rel = p.lexically_relative(memory_->name).generic_string();
        return rel == "." ? "" : rel;
    }
    const std::string* find(const fs::path& p) const
    {
        const auto it = memory_->files.find(relative(p));
        return it == memory_->files.end() ? nullptr : &it->second;
    }
    const std::string& bytes(const std::string& path) const
    {
        const std::string* b = find(path);
        RETEXO_ENSURE(b != nullptr, path << ": cannot open: " << std::strerror(ENOENT));
        return *b;
    }
    const ogb_memory_dir* memory_ = nullptr;
};

/// dir/name.csv.gz, or dir/name.csv if only the plain file exists.
std::string data_file(const dataset_files& files, const fs::path& dir, const std::string& name)
{
    const auto gz = dir / (name + ".csv.gz");
    if (files.exists(gz)) return gz.string();
    const auto plain = dir / (name + ".csv");
    if (files.exists(plain)) return plain.string();
    RETEXO_THROW(gz.string() << ": missing (expected the OGB raw layout: raw/*.csv.gz, or raw/data.npz and "
                                "raw/node-label.npz; see FORMAT.md)");
}

std::int64_t read_single_count(const dataset_files& files, const std::string& path)
{
    text_reader in = files.text(path);
    const auto values = read_integer_lines(in);
    RETEXO_ENSURE(values.size() == 1, path << ": expected one count, found " << values.size()
                                           << " lines (only single-graph datasets are supported)");
    RETEXO_ENSURE(values[0] >= 0, path << ": negative count " << values[0]);
    return values[0];
}

std::vector<node_t> read_split_file(const dataset_files& files, const std::string& path, node_t n)
{
    text_reader in = files.text(path);
    const auto values = read_integer_lines(in);
    std::vector<node_t> ids;
    ids.reserve(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        RETEXO_ENSURE(values[i] >= 0 && values[i] < n,
                      path << ":" << i + 1 << ": node id " << values[i] << " outside [0, " << n << ")");
        ids.push_back(static_cast<node_t>(values[i]));
    }
    std::sort(ids.begin(), ids.end());
    const auto dup = std::adjacent_find(ids.begin(), ids.end());
    RETEXO_ENSURE(dup == ids.end(), path << ": node id " << *dup << " is listed twice");
    return ids;
}

struct meta_info {
    std::optional<bool> directed;
    int num_classes = 0;
    std::string name;
};

meta_info read_meta(const dataset_files& files, const fs::path& dir)
{
    meta_info m;
    const auto path = dir / "meta.json";
    if (!files.exists(path)) return m;
    const auto f = files.open(path);
    RETEXO_ENSURE(f->good(), path.string() << ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(*f);
        if (j.contains("directed")) m.directed = j.at("directed").get<bool>();
        if (j.contains("num_classes")) m.num_classes = j.at("num_classes").get<int>();
        if (j.contains("name")) m.name = j.at("name").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
        RETEXO_THROW(path.string() << ": invalid meta.json: " << e.what());
    }
    return m;
}

/// The edge list "src,dst" per line (ids in [0, n)); returns the number of edges, which must
/// be `expected`.
offset_t read_edges(const dataset_files& files, const std::string& path, node_t n, std::int64_t expected,
                    std::vector<node_t>& src, std::vector<node_t>& dst)
{
    // num-edge-list is not trusted with memory: up to 4M edges are reserved, the rest grows as
    // lines arrive, so a wrong count ends in the count check below and not in std::bad_alloc.
    const auto reserve = static_cast<std::size_t>(std::clamp<std::int64_t>(expected, 0, std::int64_t{1} << 22));
    src.reserve(reserve);
    dst.reserve(reserve);
    text_reader in = files.text(path);
    std::string_view line;
    while (in.next(line)) {
        if (line.empty()) continue;
        const auto comma = line.find(',');
        RETEXO_ENSURE(comma != std::string_view::npos, in.where() << ": expected 'src,dst', got '" << line << "'");
        const auto u = parse_number<std::int64_t>(line.substr(0, comma), in.where());
        const auto v = parse_number<std::int64_t>(line.substr(comma + 1), in.where());
        RETEXO_ENSURE(u >= 0 && u < n && v >= 0 && v < n,
                      in.where() << ": edge " << u << "," << v << " has a node id outside [0, " << n << ")");
        src.push_back(static_cast<node_t>(u));
        dst.push_back(static_cast<node_t>(v));
    }
    const auto lines = static_cast<offset_t>(src.size());
    RETEXO_ENSURE(lines == expected, in.path() << ": " << lines << " edge lines but num-edge-list says " << expected
                                               << " (truncated file?)");
    return lines;
}

/// One class label per line, one line per node.
std::vector<std::int32_t> read_labels(const dataset_files& files, const std::string& path, node_t n)
{
    std::vector<std::int32_t> labels;
    labels.reserve(static_cast<std::size_t>(n));
    text_reader in = files.text(path);
    std::string_view line;
    while (in.next(line)) {
        RETEXO_ENSURE(line.find(',') == std::string_view::npos, in.where()
                                                                    << ": multi-column labels are not supported");
        const auto y = parse_number<std::int64_t>(line, in.where());
        RETEXO_ENSURE(y >= 0 && y < (1 << 30), in.where() << ": label " << y << " is negative or too large");
        labels.push_back(static_cast<std::int32_t>(y));
    }
    RETEXO_ENSURE(static_cast<node_t>(labels.size()) == n,
                  in.path() << ": " << labels.size() << " labels for " << n << " nodes");
    return labels;
}

// ---- the binary layout (raw/data.npz, raw/node-label.npz) ----

/// A count array of shape (1,) (num_nodes_list, num_edges_list).
std::int64_t read_npz_count(const dataset_files& files, const std::string& path, const std::string& name)
{
    npz_array_reader a = files.npz(path, name);
    RETEXO_ENSURE(a.size() == 1, a.where() << ": expected one count, found shape " << a.shape_string()
                                           << " (only single-graph datasets are supported)");
    std::int64_t value = 0;
    a.read(std::span(&value, 1));
    RETEXO_ENSURE(value >= 0, a.where() << ": negative count " << value);
    return value;
}

/// The shapes of edge_index (2, E), node_feat (n, F) and node_label (n, 1) or (n,), checked
/// before any work (and before anything is sized by n).
void check_npz_shapes(const dataset_files& files, const std::string& data, const std::string& labels, node_t n,
                      std::int64_t num_edges)
{
    const npz_array_reader edges = files.npz(data, "edge_index");
    RETEXO_ENSURE(edges.shape().size() == 2 && edges.shape()[0] == 2,
                  edges.where() << ": shape " << edges.shape_string() << ", expected (2, num_edges)");
    RETEXO_ENSURE(edges.shape()[1] == num_edges,
                  edges.where() << ": " << edges.shape()[1] << " edges but num_edges_list says " << num_edges);
    const npz_array_reader feat = files.npz(data, "node_feat");
    const auto& fshape = feat.shape();
    RETEXO_ENSURE(fshape.size() == 2 && fshape[0] == n && fshape[1] > 0 && fshape[1] < (std::int64_t{1} << 31),
                  feat.where() << ": shape " << feat.shape_string() << ", expected (" << n << ", num_features)");
    const npz_array_reader label = files.npz(labels, "node_label");
    const auto& ls = label.shape();
    RETEXO_ENSURE(ls.size() == 1 || (ls.size() == 2 && ls[1] == 1),
                  label.where() << ": shape " << label.shape_string()
                                << ", expected (num_nodes, 1) (multi-column labels are not supported)");
    RETEXO_ENSURE(ls[0] == n, label.where() << ": " << ls[0] << " labels for " << n << " nodes");
}

/// The CSR from edge_index (int, shape (2, E), C order: the E sources, then the E
/// destinations), streamed twice through two readers; memory is the CSR plus O(n).
csr read_npz_edges(const dataset_files& files, const std::string& path, node_t n, std::int64_t expected, bool directed,
                   ogb_report& rep)
{
    // check_npz_shapes made sure edge_index is (2, expected).
    constexpr std::int64_t block = std::int64_t{1} << 20;
    std::vector<node_t> src(static_cast<std::size_t>(std::min(block, expected)));
    std::vector<node_t> dst(src.size());
    auto produce = [&](const edge_block_visitor& visit) {
        npz_array_reader s = files.npz(path, "edge_index");
        npz_array_reader d = files.npz(path, "edge_index");
        d.skip(expected);
        for (std::int64_t done = 0; done < expected;) {
            const auto k = static_cast<std::size_t>(std::min(block, expected - done));
            s.read(std::span(src).first(k));
            d.read(std::span(dst).first(k));
            for (std::size_t j = 0; j < k; ++j)
                RETEXO_ENSURE(src[j] >= 0 && src[j] < n && dst[j] >= 0 && dst[j] < n,
                              s.where() << ": edge " << done + static_cast<std::int64_t>(j) << " (" << src[j] << ","
                                        << dst[j] << ") has a node id outside [0, " << n << ")");
            visit(std::span(src).first(k), std::span(dst).first(k));
            done += static_cast<std::int64_t>(k);
        }
    };
    csr_build_report build;
    csr in_edges = build_csr_streamed(n, produce, {.symmetrise = !directed}, &build);
    rep.edge_lines = expected;
    rep.self_loops_dropped = build.self_loops_dropped;
    rep.duplicates_dropped = build.duplicates_dropped;
    return in_edges;
}

/// node_label of shape (n, 1) or (n,), integer or float; NaN marks a node without a label
/// (stored as 0, labelled[v] = 0).
std::vector<std::int32_t> read_npz_labels(const dataset_files& files, const std::string& path, node_t n,
                                          std::vector<std::uint8_t>& labelled)
{
    npz_array_reader a = files.npz(path, "node_label"); // check_npz_shapes: (n, 1) or (n,)
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n), 0);
    labelled.assign(static_cast<std::size_t>(n), 1);
    std::vector<double> buf(std::min(std::size_t{1} << 16, static_cast<std::size_t>(n)));
    for (node_t v0 = 0; v0 < n;) {
        const auto k = a.read(std::span(buf));
        for (std::size_t j = 0; j < k; ++j) {
            const double y = buf[j];
            const auto v = static_cast<std::size_t>(v0) + j;
            if (std::isnan(y)) {
                labelled[v] = 0;
                continue;
            }
            RETEXO_ENSURE(y >= 0 && y < (1 << 30) && y == std::floor(y),
                          a.where() << ": node " << v << " has label " << y
                                    << ", which is negative, fractional or too large");
            labels[v] = static_cast<std::int32_t>(y);
        }
        v0 += static_cast<node_t>(k);
    }
    return labels;
}

/// Split names present under dir/split.
std::vector<std::string> split_names(const dataset_files& files, const std::string& dir)
{
    const fs::path split_dir = fs::path(dir) / "split";
    if (!files.is_directory(split_dir)) return {};
    return files.subdirectories(split_dir);
}

} // namespace

std::vector<std::string> ogb_splits(const std::string& dir)
{
    return split_names(dataset_files(), dir);
}

namespace {

/// A dataset directory: where its raw files are, and which layout they use.
struct ogb_layout {
    const dataset_files* files = nullptr;
    std::string dir_name; // as given, for error messages
    fs::path dir;
    fs::path raw;
    meta_info meta;
    bool binary = false;   // raw/data.npz and raw/node-label.npz instead of the CSV files
    std::string data_npz;  // raw/data.npz
    std::string label_npz; // raw/node-label.npz
};

ogb_layout open_layout(const dataset_files& files, const std::string& dir_name)
{
    ogb_layout l;
    l.files = &files;
    l.dir_name = dir_name;
    l.dir = dir_name;
    RETEXO_ENSURE(files.is_directory(l.dir), dir_name << ": not a directory");
    l.raw = l.dir / "raw";
    RETEXO_ENSURE(files.is_directory(l.raw), l.raw.string() << ": missing (expected the OGB raw layout)");
    l.meta = read_meta(files, l.dir);
    // The binary layout (OGB's binary=True datasets such as ogbn-papers100M): raw/data.npz
    // and raw/node-label.npz instead of the CSV files.
    l.data_npz = (l.raw / "data.npz").string();
    l.binary = files.exists(l.data_npz);
    l.label_npz = (l.raw / "node-label.npz").string();
    if (l.binary)
        RETEXO_ENSURE(files.exists(l.label_npz), l.label_npz << ": missing (the binary layout has raw/data.npz "
                                                                "and raw/node-label.npz, see FORMAT.md)");
    return l;
}

struct ogb_counts {
    node_t n = 0;
    std::int64_t edges = 0;
};

/// The numbers of nodes (below 2^31) and edges; the binary layout's array shapes are checked
/// here too, before anything is sized by n.
ogb_counts read_counts(const ogb_layout& l)
{
    ogb_counts c;
    const auto& files = *l.files;
    const auto n64 = l.binary ? read_npz_count(files, l.data_npz, "num_nodes_list")
                              : read_single_count(files, data_file(files, l.raw, "num-node-list"));
    RETEXO_ENSURE(n64 < (std::int64_t{1} << 31), l.dir_name << ": " << n64 << " nodes exceed 2^31 - 1");
    c.n = static_cast<node_t>(n64);
    c.edges = l.binary ? read_npz_count(files, l.data_npz, "num_edges_list")
                       : read_single_count(files, data_file(files, l.raw, "num-edge-list"));
    if (l.binary) check_npz_shapes(files, l.data_npz, l.label_npz, c.n, c.edges);
    return c;
}

/// The split: a named one under split/ (its directory is returned), or one drawn at random
/// after the labels are read (an empty path is returned).  Sets rep.split.
fs::path choose_split(const ogb_layout& l, const ogb_options& options, ogb_report& rep)
{
    if (options.random_split) {
        RETEXO_ENSURE(options.split.empty(), l.dir_name << ": give a split name or a random split, not both");
        rep.split = "random-" + std::to_string(options.random_split->seed);
        return {};
    }
    std::string split = options.split;
    const auto splits = split_names(*l.files, l.dir_name);
    if (split.empty()) {
        std::string list;
        for (const auto& s : splits)
            list += " " + s;
        RETEXO_ENSURE(splits.size() == 1, l.dir_name << ": choose a split with --split (available:"
                                                     << (list.empty() ? " none" : list) << ")");
        split = splits[0];
    }
    fs::path split_dir = l.dir / "split" / split;
    RETEXO_ENSURE(l.files->is_directory(split_dir), split_dir.string() << ": no such split");
    rep.split = split;
    return split_dir;
}

/// The in-edge CSR of either layout; sets the edge counts of rep.
csr read_graph(const ogb_layout& l, const ogb_counts& c, bool directed, ogb_report& rep)
{
    if (l.binary) return read_npz_edges(*l.files, l.data_npz, c.n, c.edges, directed, rep);
    std::vector<node_t> src, dst;
    rep.edge_lines = read_edges(*l.files, data_file(*l.files, l.raw, "edge"), c.n, c.edges, src, dst);
    csr_build_report build;
    csr in_edges = build_csr(c.n, src, dst, {.symmetrise = !directed}, &build);
    rep.self_loops_dropped = build.self_loops_dropped;
    rep.duplicates_dropped = build.duplicates_dropped;
    return in_edges;
}

struct label_data {
    std::vector<std::int32_t> labels;
    std::vector<std::uint8_t> labelled; // binary layout: 0 for the nodes whose label is NaN
    std::string path;
    std::size_t unlabelled = 0;
    int num_classes = 0;
};

/// The labels of either layout, and the number of classes (given, from meta.json, or the
/// largest label + 1).
label_data read_label_data(const ogb_layout& l, node_t n, const ogb_options& options)
{
    label_data y;
    y.path = l.binary ? l.label_npz : data_file(*l.files, l.raw, "node-label");
    y.labels = l.binary ? read_npz_labels(*l.files, l.label_npz, n, y.labelled) : read_labels(*l.files, y.path, n);
    y.unlabelled = static_cast<std::size_t>(std::count(y.labelled.begin(), y.labelled.end(), 0));
    y.num_classes = options.num_classes > 0 ? options.num_classes : l.meta.num_classes;
    const int max_label = y.labels.empty() ? -1 : *std::max_element(y.labels.begin(), y.labels.end());
    if (y.num_classes <= 0) y.num_classes = max_label + 1;
    RETEXO_ENSURE(max_label < y.num_classes,
                  y.path << ": label " << max_label << " is outside 0.." << y.num_classes - 1);
    return y;
}

/// The train/valid/test node lists: drawn at random, or read from split_dir (whose nodes must
/// all have a label).
split_lists read_split_lists(const ogb_layout& l, const fs::path& split_dir, node_t n, const label_data& y,
                             const ogb_options& options)
{
    split_lists sl;
    if (options.random_split) {
        RETEXO_ENSURE(y.unlabelled == 0, y.path << ": " << y.unlabelled
                                                << " nodes have no label (NaN); a random split needs every node "
                                                   "labelled, use the dataset's split");
        try {
            sl = random_split(y.labels, y.num_classes, *options.random_split);
        } catch (const error& e) {
            RETEXO_THROW(l.dir_name << ": " << e.what());
        }
        return sl;
    }
    const auto& files = *l.files;
    sl.train = read_split_file(files, data_file(files, split_dir, "train"), n);
    sl.valid = read_split_file(files, data_file(files, split_dir, "valid"), n);
    sl.test = read_split_file(files, data_file(files, split_dir, "test"), n);
    try {
        (void)split_membership(n, sl.train, sl.valid, sl.test);
    } catch (const error& e) {
        RETEXO_THROW(split_dir.string() << ": " << e.what());
    }
    if (y.unlabelled > 0) {
        const std::pair<const char*, const std::vector<node_t>*> parts[] = {
            {"train", &sl.train}, {"valid", &sl.valid}, {"test", &sl.test}};
        for (const auto& [name, ids] : parts)
            for (node_t v : *ids)
                RETEXO_ENSURE(y.labelled[v] != 0, data_file(files, split_dir, name)
                                                      << ": node " << v << " has no label (NaN in " << y.path << ")");
    }
    return sl;
}

/// Features: a source that appends up to max_rows rows to a block and says how many.
class feature_rows {
public:
    virtual ~feature_rows() = default;
    virtual node_t next(std::vector<float>& block, node_t max_rows) = 0;
    int num_features = 0;
    std::string path; // for error messages
};

/// node_feat of raw/data.npz (shape (n, F), checked by check_npz_shapes).
class npz_feature_rows final : public feature_rows {
public:
    npz_feature_rows(const dataset_files& files, const std::string& data_npz, node_t n)
        : in_(files.npz(data_npz, "node_feat")), n_(n)
    {
        path = in_.where();
        num_features = static_cast<int>(in_.shape()[1]); // check_npz_shapes: (n, F)
    }
    node_t next(std::vector<float>& block, node_t max_rows) override
    {
        const auto rows = static_cast<node_t>(std::min<std::int64_t>(max_rows, n_ - seen_));
        const std::size_t old = block.size();
        block.resize(old + static_cast<std::size_t>(rows) * num_features);
        in_.read(std::span(block).subspan(old));
        for (std::size_t i = old; i < block.size(); ++i)
            if (!std::isfinite(block[i])) {
                const auto k = static_cast<std::int64_t>(i - old);
                RETEXO_THROW(path << ": non-finite value " << block[i] << " at node " << seen_ + k / num_features
                                  << ", feature " << k % num_features);
            }
        seen_ += rows;
        return rows;
    }

private:
    npz_array_reader in_;
    node_t n_;
    node_t seen_ = 0;
};

/// raw/node-feat.csv(.gz): one row of comma-separated values per node; the first row, read
/// on opening, gives the number of features.
class csv_feature_rows final : public feature_rows {
public:
    csv_feature_rows(const dataset_files& files, const std::string& file, node_t n) : in_(files.text(file)), n_(n)
    {
        path = in_.path();
        RETEXO_ENSURE(in_.next(line_), path << ": empty feature file");
        parse_csv_numbers<float>(line_, in_.where(), first_row_);
        num_features = static_cast<int>(first_row_.size());
    }
    node_t next(std::vector<float>& block, node_t max_rows) override
    {
        node_t rows = 0;
        if (seen_ == 0 && !first_row_.empty()) {
            block.insert(block.end(), first_row_.begin(), first_row_.end());
            release(first_row_);
            rows = seen_ = 1;
        }
        while (rows < max_rows && in_.next(line_)) {
            RETEXO_ENSURE(seen_ < n_, in_.where() << ": more feature rows than the " << n_ << " nodes");
            const auto got = parse_csv_numbers<float>(line_, in_.where(), block);
            RETEXO_ENSURE(got == static_cast<std::size_t>(num_features),
                          in_.where() << ": ragged feature rows: " << got << " values, expected " << num_features);
            ++rows;
            ++seen_;
        }
        return rows;
    }

private:
    text_reader in_;
    node_t n_;
    std::string_view line_;
    std::vector<float> first_row_;
    node_t seen_ = 0;
};

std::unique_ptr<feature_rows> open_features(const ogb_layout& l, node_t n)
{
    if (l.binary) return std::make_unique<npz_feature_rows>(*l.files, l.data_npz, n);
    return std::make_unique<csv_feature_rows>(*l.files, data_file(*l.files, l.raw, "node-feat"), n);
}

graph_info make_info(const ogb_layout& l, const ogb_options& options, bool directed, node_t n, const csr& in_edges,
                     int num_features, int num_classes)
{
    graph_info info;
    info.name = !options.name.empty()  ? options.name
                : !l.meta.name.empty() ? l.meta.name
                                       : fs::absolute(l.dir).lexically_normal().filename().string();
    if (info.name.empty()) info.name = fs::absolute(l.dir).parent_path().filename().string();
    info.directed = directed;
    info.num_nodes = n;
    info.num_edges = in_edges.num_edges();
    info.num_features = num_features;
    info.num_classes = num_classes;
    return info;
}

/// Where the graph file goes: out_path, or (memory != nullptr) a file made in memory and
/// named out_path.
struct graph_output {
    std::string path;
    std::optional<h5::file>* memory = nullptr;
};

/// Writes the file: the features, streamed in row blocks straight into it.  The storage follows
/// the density of the first block (unless given): the writer is made when it is complete.
void write_graph(const graph_output& out, const graph_info& info, const csr& in_edges, const label_data& y,
                 const split_lists& sl, feature_rows& feat, const ogb_options& options, ogb_report& rep)
{
    const node_t n = info.num_nodes;
    const int num_features = feat.num_features;
    std::optional<graph_file_writer> writer;
    constexpr node_t block_rows = 8192;
    std::vector<float> block;
    block.reserve(static_cast<std::size_t>(std::min(block_rows, std::max(n, node_t{1}))) * num_features);
    node_t total = 0;
    while (true) {
        block.clear();
        const node_t rows = feat.next(block, block_rows);
        if (rows == 0 && writer) break;
        const matrix_f dense = Eigen::Map<const matrix_f>(block.data(), rows, num_features);
        if (!writer) {
            rep.density = dense.size() > 0
                              ? static_cast<double>((dense.array() != 0.0F).count()) / static_cast<double>(dense.size())
                              : 1.0;
            rep.storage = options.features.value_or(storage_for(rep.density));
            if (out.memory != nullptr)
                writer.emplace(out.memory->emplace(h5::file::create_in_memory(out.path)), info, rep.storage);
            else
                writer.emplace(out.path, info, rep.storage);
            writer->write_structure(in_edges, y.labels, sl.train, sl.valid, sl.test);
        }
        writer->append_features(rep.storage == feature_storage::sparse ? node_features(csr_matrix::from_dense(dense))
                                                                       : node_features(dense));
        total += rows;
        if (rows == 0) break;
    }
    RETEXO_ENSURE(total == n, feat.path << ": " << total << " feature rows for " << n << " nodes");
    writer->commit();
}

/// convert_ogb from either source to either output.
ogb_report convert(const dataset_files& files, const std::string& dir_name, const graph_output& out,
                   const ogb_options& options)
{
    const ogb_layout layout = open_layout(files, dir_name);
    ogb_report rep;
    const ogb_counts counts = read_counts(layout);
    const node_t n = counts.n;
    const fs::path split_dir = choose_split(layout, options, rep);

    const bool directed = options.directed.value_or(layout.meta.directed.value_or(false));
    const csr in_edges = read_graph(layout, counts, directed, rep);
    const label_data y = read_label_data(layout, n, options);
    const split_lists sl = read_split_lists(layout, split_dir, n, y, options);
    rep.unlabelled = y.unlabelled;
    rep.train = sl.train.size();
    rep.valid = sl.valid.size();
    rep.test = sl.test.size();

    const auto feat = open_features(layout, n);
    const graph_info info = make_info(layout, options, directed, n, in_edges, feat->num_features, y.num_classes);
    rep.info = info;
    write_graph(out, info, in_edges, y, sl, *feat, options, rep);
    return rep;
}

} // namespace

ogb_report convert_ogb(const std::string& dir_name, const std::string& out_path, const ogb_options& options)
{
    return convert(dataset_files(), dir_name, {.path = out_path}, options);
}

ogb_report convert_ogb(const ogb_memory_dir& dir, std::vector<char>& image, const ogb_options& options)
{
    RETEXO_ENSURE(!dir.name.empty(), "convert_ogb: the directory held in memory needs a name");
    std::optional<h5::file> out;
    ogb_report rep = convert(dataset_files(dir), dir.name, {.path = dir.name + ".h5", .memory = &out}, options);
    image = out->image();
    return rep;
}

} // namespace retexo
