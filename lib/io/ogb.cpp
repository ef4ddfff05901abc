#include <retexo/io/graph_file.hpp>
#include <retexo/io/npz.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/text_reader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace retexo {

namespace {

/// dir/name.csv.gz, or dir/name.csv if only the plain file exists.
std::string data_file(const fs::path& dir, const std::string& name)
{
    const auto gz = dir / (name + ".csv.gz");
    if (fs::exists(gz)) return gz.string();
    const auto plain = dir / (name + ".csv");
    if (fs::exists(plain)) return plain.string();
    RETEXO_THROW(gz.string() << ": missing (expected the OGB raw layout: raw/*.csv.gz, or raw/data.npz and "
                                "raw/node-label.npz; see FORMAT.md)");
}

std::int64_t read_single_count(const std::string& path)
{
    const auto values = read_integer_lines(path);
    RETEXO_ENSURE(values.size() == 1, path << ": expected one count, found " << values.size()
                                           << " lines (only single-graph datasets are supported)");
    RETEXO_ENSURE(values[0] >= 0, path << ": negative count " << values[0]);
    return values[0];
}

std::vector<node_t> read_split_file(const std::string& path, node_t n)
{
    const auto values = read_integer_lines(path);
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

meta_info read_meta(const fs::path& dir)
{
    meta_info m;
    const auto path = dir / "meta.json";
    if (!fs::exists(path)) return m;
    std::ifstream f(path);
    RETEXO_ENSURE(f.good(), path.string() << ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f);
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
offset_t read_edges(const std::string& path, node_t n, std::int64_t expected, std::vector<node_t>& src,
                    std::vector<node_t>& dst)
{
    src.reserve(static_cast<std::size_t>(expected));
    dst.reserve(static_cast<std::size_t>(expected));
    text_reader in(path);
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
std::vector<std::int32_t> read_labels(const std::string& path, node_t n)
{
    std::vector<std::int32_t> labels;
    labels.reserve(static_cast<std::size_t>(n));
    text_reader in(path);
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
std::int64_t read_npz_count(const std::string& path, const std::string& name)
{
    npz_array_reader a(path, name);
    RETEXO_ENSURE(a.size() == 1, a.where() << ": expected one count, found shape " << a.shape_string()
                                           << " (only single-graph datasets are supported)");
    std::int64_t value = 0;
    a.read(std::span(&value, 1));
    RETEXO_ENSURE(value >= 0, a.where() << ": negative count " << value);
    return value;
}

/// The shapes of edge_index (2, E), node_feat (n, F) and node_label (n, 1) or (n,), checked
/// before any work (and before anything is sized by n).
void check_npz_shapes(const std::string& data, const std::string& labels, node_t n, std::int64_t num_edges)
{
    const npz_array_reader edges(data, "edge_index");
    RETEXO_ENSURE(edges.shape().size() == 2 && edges.shape()[0] == 2,
                  edges.where() << ": shape " << edges.shape_string() << ", expected (2, num_edges)");
    RETEXO_ENSURE(edges.shape()[1] == num_edges,
                  edges.where() << ": " << edges.shape()[1] << " edges but num_edges_list says " << num_edges);
    const npz_array_reader feat(data, "node_feat");
    const auto& fshape = feat.shape();
    RETEXO_ENSURE(fshape.size() == 2 && fshape[0] == n && fshape[1] > 0 && fshape[1] < (std::int64_t{1} << 31),
                  feat.where() << ": shape " << feat.shape_string() << ", expected (" << n << ", num_features)");
    const npz_array_reader label(labels, "node_label");
    const auto& ls = label.shape();
    RETEXO_ENSURE(ls.size() == 1 || (ls.size() == 2 && ls[1] == 1),
                  label.where() << ": shape " << label.shape_string()
                                << ", expected (num_nodes, 1) (multi-column labels are not supported)");
    RETEXO_ENSURE(ls[0] == n, label.where() << ": " << ls[0] << " labels for " << n << " nodes");
}

/// The CSR from edge_index (int, shape (2, E), C order: the E sources, then the E
/// destinations), streamed twice through two readers; memory is the CSR plus O(n).
csr read_npz_edges(const std::string& path, node_t n, std::int64_t expected, bool directed, ogb_report& rep)
{
    // check_npz_shapes made sure edge_index is (2, expected).
    constexpr std::int64_t block = std::int64_t{1} << 20;
    std::vector<node_t> src(static_cast<std::size_t>(std::min(block, expected)));
    std::vector<node_t> dst(src.size());
    auto produce = [&](const edge_block_visitor& visit) {
        npz_array_reader s(path, "edge_index");
        npz_array_reader d(path, "edge_index");
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
std::vector<std::int32_t> read_npz_labels(const std::string& path, node_t n, std::vector<std::uint8_t>& labelled)
{
    npz_array_reader a(path, "node_label"); // check_npz_shapes: (n, 1) or (n,)
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n), 0);
    labelled.assign(static_cast<std::size_t>(n), 1);
    std::vector<double> buf(std::size_t{1} << 16);
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

} // namespace

std::vector<std::string> ogb_splits(const std::string& dir)
{
    std::vector<std::string> names;
    const fs::path split_dir = fs::path(dir) / "split";
    if (!fs::is_directory(split_dir)) return names;
    for (const auto& entry : fs::directory_iterator(split_dir))
        if (entry.is_directory()) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

ogb_report convert_ogb(const std::string& dir_name, const std::string& out_path, const ogb_options& options)
{
    const fs::path dir(dir_name);
    RETEXO_ENSURE(fs::is_directory(dir), dir_name << ": not a directory");
    const fs::path raw = dir / "raw";
    RETEXO_ENSURE(fs::is_directory(raw), raw.string() << ": missing (expected the OGB raw layout)");
    const meta_info meta = read_meta(dir);
    // The binary layout (OGB's binary=True datasets such as ogbn-papers100M): raw/data.npz
    // and raw/node-label.npz instead of the CSV files.
    const std::string data_npz = (raw / "data.npz").string();
    const bool binary = fs::exists(data_npz);
    const std::string label_npz = (raw / "node-label.npz").string();
    if (binary)
        RETEXO_ENSURE(fs::exists(label_npz), label_npz << ": missing (the binary layout has raw/data.npz "
                                                          "and raw/node-label.npz, see FORMAT.md)");

    ogb_report rep;
    const auto n64 =
        binary ? read_npz_count(data_npz, "num_nodes_list") : read_single_count(data_file(raw, "num-node-list"));
    RETEXO_ENSURE(n64 < (std::int64_t{1} << 31), dir_name << ": " << n64 << " nodes exceed 2^31 - 1");
    const auto n = static_cast<node_t>(n64);
    const auto expected_edges =
        binary ? read_npz_count(data_npz, "num_edges_list") : read_single_count(data_file(raw, "num-edge-list"));
    if (binary) check_npz_shapes(data_npz, label_npz, n, expected_edges);

    // Split: a named one under split/, or one drawn at random after the labels are read.
    fs::path split_dir;
    if (options.random_split) {
        RETEXO_ENSURE(options.split.empty(), dir_name << ": give a split name or a random split, not both");
        rep.split = "random-" + std::to_string(options.random_split->seed);
    } else {
        std::string split = options.split;
        const auto splits = ogb_splits(dir_name);
        if (split.empty()) {
            std::string list;
            for (const auto& s : splits)
                list += " " + s;
            RETEXO_ENSURE(splits.size() == 1, dir_name << ": choose a split with --split (available:"
                                                       << (list.empty() ? " none" : list) << ")");
            split = splits[0];
        }
        split_dir = dir / "split" / split;
        RETEXO_ENSURE(fs::is_directory(split_dir), split_dir.string() << ": no such split");
        rep.split = split;
    }

    const bool directed = options.directed.value_or(meta.directed.value_or(false));
    csr in_edges;
    if (binary) {
        in_edges = read_npz_edges(data_npz, n, expected_edges, directed, rep);
    } else {
        std::vector<node_t> src, dst;
        rep.edge_lines = read_edges(data_file(raw, "edge"), n, expected_edges, src, dst);
        csr_build_report build;
        in_edges = build_csr(n, src, dst, {.symmetrise = !directed}, &build);
        rep.self_loops_dropped = build.self_loops_dropped;
        rep.duplicates_dropped = build.duplicates_dropped;
    }

    std::vector<std::uint8_t> labelled; // binary layout: 0 for the nodes whose label is NaN
    const std::string label_path = binary ? label_npz : data_file(raw, "node-label");
    const auto labels = binary ? read_npz_labels(label_npz, n, labelled) : read_labels(label_path, n);
    const auto unlabelled = static_cast<std::size_t>(std::count(labelled.begin(), labelled.end(), 0));
    int num_classes = options.num_classes > 0 ? options.num_classes : meta.num_classes;
    const int max_label = labels.empty() ? -1 : *std::max_element(labels.begin(), labels.end());
    if (num_classes <= 0) num_classes = max_label + 1;
    RETEXO_ENSURE(max_label < num_classes,
                  label_path << ": label " << max_label << " is outside 0.." << num_classes - 1);

    split_lists sl;
    if (options.random_split) {
        RETEXO_ENSURE(unlabelled == 0, label_path << ": " << unlabelled
                                                  << " nodes have no label (NaN); a random split needs every node "
                                                     "labelled, use the dataset's split");
        try {
            sl = random_split(labels, num_classes, *options.random_split);
        } catch (const error& e) {
            RETEXO_THROW(dir_name << ": " << e.what());
        }
    } else {
        sl.train = read_split_file(data_file(split_dir, "train"), n);
        sl.valid = read_split_file(data_file(split_dir, "valid"), n);
        sl.test = read_split_file(data_file(split_dir, "test"), n);
        try {
            (void)split_membership(n, sl.train, sl.valid, sl.test);
        } catch (const error& e) {
            RETEXO_THROW(split_dir.string() << ": " << e.what());
        }
        if (unlabelled > 0) {
            const std::pair<const char*, const std::vector<node_t>*> parts[] = {
                {"train", &sl.train}, {"valid", &sl.valid}, {"test", &sl.test}};
            for (const auto& [name, ids] : parts)
                for (node_t v : *ids)
                    RETEXO_ENSURE(labelled[v] != 0, data_file(split_dir, name)
                                                        << ": node " << v << " has no label (NaN in " << label_path
                                                        << ")");
        }
    }
    rep.unlabelled = unlabelled;
    rep.train = sl.train.size();
    rep.valid = sl.valid.size();
    rep.test = sl.test.size();

    // Features: a source that appends up to max_rows rows to a block and says how many.
    std::function<node_t(std::vector<float>&, node_t)> next_rows;
    int num_features = 0;
    std::string feat_path;
    std::optional<text_reader> feat;
    std::optional<npz_array_reader> feat_npz;
    std::string_view line;
    std::vector<float> first_row;
    node_t seen = 0;
    if (binary) {
        feat_npz.emplace(data_npz, "node_feat");
        feat_path = feat_npz->where();
        num_features = static_cast<int>(feat_npz->shape()[1]); // check_npz_shapes: (n, F)
        next_rows = [&](std::vector<float>& block, node_t max_rows) {
            const auto rows = static_cast<node_t>(std::min<std::int64_t>(max_rows, n - seen));
            const std::size_t old = block.size();
            block.resize(old + static_cast<std::size_t>(rows) * num_features);
            feat_npz->read(std::span(block).subspan(old));
            for (std::size_t i = old; i < block.size(); ++i)
                if (!std::isfinite(block[i])) {
                    const auto k = static_cast<std::int64_t>(i - old);
                    RETEXO_THROW(feat_path << ": non-finite value " << block[i] << " at node "
                                           << seen + k / num_features << ", feature " << k % num_features);
                }
            seen += rows;
            return rows;
        };
    } else {
        feat.emplace(data_file(raw, "node-feat"));
        feat_path = feat->path();
        RETEXO_ENSURE(feat->next(line), feat_path << ": empty feature file");
        parse_csv_numbers<float>(line, feat->where(), first_row);
        num_features = static_cast<int>(first_row.size());
        next_rows = [&](std::vector<float>& block, node_t max_rows) {
            node_t rows = 0;
            if (seen == 0 && !first_row.empty()) {
                block.insert(block.end(), first_row.begin(), first_row.end());
                release(first_row);
                rows = seen = 1;
            }
            while (rows < max_rows && feat->next(line)) {
                RETEXO_ENSURE(seen < n, feat->where() << ": more feature rows than the " << n << " nodes");
                const auto got = parse_csv_numbers<float>(line, feat->where(), block);
                RETEXO_ENSURE(got == static_cast<std::size_t>(num_features),
                              feat->where()
                                  << ": ragged feature rows: " << got << " values, expected " << num_features);
                ++rows;
                ++seen;
            }
            return rows;
        };
    }

    graph_info info;
    info.name = !options.name.empty() ? options.name
                : !meta.name.empty()  ? meta.name
                                      : fs::absolute(dir).lexically_normal().filename().string();
    if (info.name.empty()) info.name = fs::absolute(dir).parent_path().filename().string();
    info.directed = directed;
    info.num_nodes = n;
    info.num_edges = in_edges.num_edges();
    info.num_features = num_features;
    info.num_classes = num_classes;
    rep.info = info;

    // Features, streamed in row blocks straight into the output file.  The storage follows
    // the density of the first block (unless given): the writer is made when it is complete.
    std::optional<graph_file_writer> writer;
    constexpr node_t block_rows = 8192;
    std::vector<float> block;
    block.reserve(static_cast<std::size_t>(std::min(block_rows, std::max(n, node_t{1}))) * num_features);
    node_t total = 0;
    while (true) {
        block.clear();
        const node_t rows = next_rows(block, block_rows);
        if (rows == 0 && writer) break;
        const matrix_f dense = Eigen::Map<const matrix_f>(block.data(), rows, num_features);
        if (!writer) {
            rep.density = dense.size() > 0
                              ? static_cast<double>((dense.array() != 0.0F).count()) / static_cast<double>(dense.size())
                              : 1.0;
            rep.storage = options.features.value_or(storage_for(rep.density));
            writer.emplace(out_path, info, rep.storage);
            writer->write_structure(in_edges, labels, sl.train, sl.valid, sl.test);
        }
        writer->append_features(rep.storage == feature_storage::sparse ? node_features(csr_matrix::from_dense(dense))
                                                                       : node_features(dense));
        total += rows;
        if (rows == 0) break;
    }
    RETEXO_ENSURE(total == n, feat_path << ": " << total << " feature rows for " << n << " nodes");
    writer->commit();
    return rep;
}

} // namespace retexo
