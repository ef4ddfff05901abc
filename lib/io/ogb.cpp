#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/text_reader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
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
    RETEXO_THROW(gz.string() << ": missing (expected the OGB raw layout, see FORMAT.md)");
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

    ogb_report rep;
    const auto n64 = read_single_count(data_file(raw, "num-node-list"));
    RETEXO_ENSURE(n64 < (std::int64_t{1} << 31), dir_name << ": " << n64 << " nodes exceed 2^31 - 1");
    const auto n = static_cast<node_t>(n64);
    const auto expected_edges = read_single_count(data_file(raw, "num-edge-list"));

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

    std::vector<node_t> src, dst;
    rep.edge_lines = read_edges(data_file(raw, "edge"), n, expected_edges, src, dst);
    const bool directed = options.directed.value_or(meta.directed.value_or(false));
    csr_build_report build;
    csr in_edges = build_csr(n, src, dst, {.symmetrise = !directed}, &build);
    rep.self_loops_dropped = build.self_loops_dropped;
    rep.duplicates_dropped = build.duplicates_dropped;
    release(src);
    release(dst);

    const auto labels = read_labels(data_file(raw, "node-label"), n);
    int num_classes = options.num_classes > 0 ? options.num_classes : meta.num_classes;
    const int max_label = labels.empty() ? -1 : *std::max_element(labels.begin(), labels.end());
    if (num_classes <= 0) num_classes = max_label + 1;
    RETEXO_ENSURE(max_label < num_classes, data_file(raw, "node-label")
                                               << ": label " << max_label << " is outside 0.." << num_classes - 1);

    split_lists sl;
    if (options.random_split) {
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
    }
    rep.train = sl.train.size();
    rep.valid = sl.valid.size();
    rep.test = sl.test.size();

    // Features, streamed in row blocks straight into the output file.
    text_reader feat(data_file(raw, "node-feat"));
    std::string_view line;
    std::vector<float> block;
    RETEXO_ENSURE(feat.next(line), feat.path() << ": empty feature file");
    parse_csv_numbers<float>(line, feat.where(), block);
    const auto num_features = static_cast<int>(block.size());

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

    // The storage follows the density of the first block (unless given): the writer is made
    // when that block is complete.
    std::optional<graph_file_writer> writer;
    constexpr node_t block_rows = 8192;
    node_t rows = 1;
    node_t total = 0;
    block.reserve(static_cast<std::size_t>(block_rows) * num_features);
    auto flush = [&] {
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
        rows = 0;
        block.clear();
    };
    while (feat.next(line)) {
        if (rows == block_rows) flush();
        RETEXO_ENSURE(total + rows < n, feat.where() << ": more feature rows than the " << n << " nodes");
        const auto got = parse_csv_numbers<float>(line, feat.where(), block);
        RETEXO_ENSURE(got == static_cast<std::size_t>(num_features),
                      feat.where() << ": ragged feature rows: " << got << " values, expected " << num_features);
        ++rows;
    }
    flush();
    RETEXO_ENSURE(total == n, feat.path() << ": " << total << " feature rows for " << n << " nodes");
    writer->commit();
    return rep;
}

} // namespace retexo
