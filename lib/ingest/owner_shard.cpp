// Owner shards: writing one (streamed features), reading and checking one, and writing every
// owner's shard from a whole graph file.
#include <retexo/ingest/owner_shard.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/text_reader.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>

namespace fs = std::filesystem;

namespace retexo {

namespace {

/// Global ids are stored 64-bit; retexo's node ids are 32-bit.
std::vector<std::int64_t> widen_ids(std::span<const node_t> ids)
{
    return {ids.begin(), ids.end()};
}

/// Rows [at, at + out.size()) of a 64-bit id dataset, as 32-bit ids.
void read_id_block(const h5::file& file, const h5::handle& ds, const std::string& name, std::size_t at,
                   std::vector<std::int64_t>& buf, std::span<node_t> out)
{
    buf.resize(out.size());
    file.read_rows<std::int64_t>(ds, name, at, buf.size(), 1, buf.data());
    for (std::size_t i = 0; i < buf.size(); ++i) {
        RETEXO_ENSURE(buf[i] >= 0 && buf[i] < (std::int64_t{1} << 31), file.path() << ": " << name << ": global id "
                                                                                   << buf[i] << " (entry " << at + i
                                                                                   << ") is outside [0, 2^31)");
        out[i] = static_cast<node_t>(buf[i]);
    }
}

/// The length of a 1-D dataset, checked against `expected` unless that is negative.
std::size_t id_count(const h5::file& file, const std::string& name, std::int64_t expected = -1)
{
    const auto d = file.dims(name);
    RETEXO_ENSURE(d.size() == 1 && (expected < 0 || d[0] == static_cast<hsize_t>(expected)),
                  file.path() << ": dataset " << name << " must be 1-D"
                              << (expected < 0 ? std::string() : " with " + std::to_string(expected) + " entries"));
    return static_cast<std::size_t>(d[0]);
}

constexpr std::size_t id_block = 1 << 20;

/// A 64-bit id dataset read as 32-bit ids, in blocks (never a 64-bit copy of it all).
std::vector<node_t> read_ids(const h5::file& file, const std::string& name, std::int64_t expected = -1)
{
    std::vector<node_t> out(id_count(file, name, expected));
    const auto ds = file.open_dataset(name);
    std::vector<std::int64_t> buf;
    for (std::size_t at = 0; at < out.size(); at += id_block)
        read_id_block(file, ds, name, at, buf, std::span(out).subspan(at, std::min(id_block, out.size() - at)));
    return out;
}

} // namespace

std::string owner_shard_path(const std::string& dir, part_t rank)
{
    return (fs::path(dir) / ("shard" + std::to_string(rank) + ".h5")).string();
}

owner_shard_writer::owner_shard_writer(const std::string& path, const graph_info& info, node_t num_nodes,
                                       feature_storage storage)
    : info_(info), num_nodes_(num_nodes), out_(path)
{
    RETEXO_ENSURE(num_nodes >= 0 && info.num_features >= 0 && info.num_classes > 0,
                  path << ": invalid shard sizes (nodes " << num_nodes << ", features " << info.num_features
                       << ", classes " << info.num_classes << ")");
    file_.emplace(h5::file::create(out_.temp_path(), path));
    file_->set_attr("retexo_format", std::string(owner_shard_format_name));
    file_->set_attr("format_version", owner_shard_format_version);
    file_->set_attr("name", info.name);
    file_->set_attr("num_features", static_cast<std::int64_t>(info.num_features));
    file_->set_attr("num_classes", static_cast<std::int64_t>(info.num_classes));
    file_->set_attr("directed", static_cast<std::int64_t>(info.directed ? 1 : 0));
    features_.emplace(*file_, "nodes/features", num_nodes, info.num_features, storage);
}

owner_shard_writer::~owner_shard_writer() = default;

void owner_shard_writer::write_nodes(std::span<const node_t> ids, std::span<const std::int32_t> labels,
                                     std::span<const split> membership)
{
    const auto& p = out_.path();
    RETEXO_ENSURE(static_cast<node_t>(ids.size()) == num_nodes_ && labels.size() == ids.size() &&
                      membership.size() == ids.size(),
                  p << ": " << ids.size() << " ids, " << labels.size() << " labels, " << membership.size()
                    << " split entries for " << num_nodes_ << " nodes");
    for (std::size_t i = 0; i < ids.size(); ++i) {
        RETEXO_ENSURE(ids[i] >= 0, p << ": node id " << ids[i] << " is negative");
        RETEXO_ENSURE(labels[i] >= 0 && labels[i] < info_.num_classes, p << ": label " << labels[i] << " of node "
                                                                         << ids[i] << " is outside 0.."
                                                                         << info_.num_classes - 1);
    }
    std::vector<std::int8_t> codes(membership.size());
    for (std::size_t i = 0; i < codes.size(); ++i)
        codes[i] = static_cast<std::int8_t>(membership[i]);
    file_->write<std::int64_t>("nodes/global_ids", widen_ids(ids));
    file_->write<std::int32_t>("nodes/labels", labels);
    file_->write<std::int8_t>("nodes/split", codes);
    nodes_written_ = true;
}

void owner_shard_writer::write_edges(std::span<const node_t> src, std::span<const node_t> dst)
{
    RETEXO_ENSURE(src.size() == dst.size(),
                  out_.path() << ": " << src.size() << " edge sources but " << dst.size() << " destinations");
    file_->write<std::int64_t>("edges/src", widen_ids(src));
    file_->write<std::int64_t>("edges/dst", widen_ids(dst));
    edges_written_ = true;
}

void owner_shard_writer::append_features(const node_features& block)
{
    features_->append(block);
}

void owner_shard_writer::commit()
{
    RETEXO_ENSURE(nodes_written_ && edges_written_, out_.path() << ": the shard's "
                                                                << (nodes_written_ ? "edges were" : "nodes were")
                                                                << " never written");
    features_->finish();
    features_.reset();
    file_->close();
    file_.reset();
    out_.commit();
}

void write_owner_shard(const std::string& path, const node_share& nodes, std::span<const node_t> edge_src,
                       std::span<const node_t> edge_dst)
{
    owner_shard_writer w(path, nodes.info, nodes.size(),
                         nodes.features.is_sparse() ? feature_storage::sparse : feature_storage::dense);
    w.write_nodes(nodes.nodes, nodes.labels, nodes.membership);
    w.write_edges(edge_src, edge_dst);
    w.append_features(nodes.features);
    w.commit();
}

namespace {

/// A shard file, its format checked, and its graph's name, directedness, feature and class counts.
std::pair<h5::file, graph_info> open_owner_shard(const std::string& path)
{
    auto file = h5::file::open(path);
    RETEXO_ENSURE(file.has_attr("retexo_format") && file.attr_string("retexo_format") == owner_shard_format_name,
                  path << ": not a retexo owner shard (attribute retexo_format != " << owner_shard_format_name << ")");
    const auto version = file.attr_int("format_version");
    RETEXO_ENSURE(version == owner_shard_format_version, path << ": owner shard format version " << version
                                                              << " is not supported (expected "
                                                              << owner_shard_format_version << ")");
    graph_info info;
    info.name = file.attr_string("name");
    info.directed = file.attr_int("directed") != 0;
    const auto features = file.attr_int("num_features");
    const auto classes = file.attr_int("num_classes");
    RETEXO_ENSURE(features >= 0 && features < (std::int64_t{1} << 31) && classes > 0 && classes < (1 << 30),
                  path << ": invalid feature count " << features << " or class count " << classes);
    info.num_features = static_cast<int>(features);
    info.num_classes = static_cast<int>(classes);
    return {std::move(file), info};
}

} // namespace

owner_shard_extent read_owner_shard_extent(const std::string& path)
{
    const auto [file, info] = open_owner_shard(path);
    owner_shard_extent e;
    e.nodes = static_cast<std::int64_t>(id_count(file, "nodes/global_ids"));
    e.edges = static_cast<std::int64_t>(id_count(file, "edges/src"));
    e.num_features = info.num_features;
    e.dense = feature_reader(file, "nodes/features", e.nodes, info.num_features).storage() == feature_storage::dense;
    return e;
}

node_share read_owner_shard_nodes(const std::string& path)
{
    const auto [file, info] = open_owner_shard(path);
    node_share n;
    n.source = path;
    n.info = info;
    n.nodes = read_ids(file, "nodes/global_ids");
    const auto count = static_cast<std::int64_t>(n.nodes.size());
    n.labels = file.read_vector<std::int32_t>("nodes/labels", count);
    for (std::int64_t i = 0; i < count; ++i)
        RETEXO_ENSURE(n.labels[i] >= 0 && n.labels[i] < n.info.num_classes,
                      path << ": label " << n.labels[i] << " of node " << n.nodes[i] << " is outside 0.."
                           << n.info.num_classes - 1);
    for (auto c : file.read_vector<std::int8_t>("nodes/split", count)) {
        RETEXO_ENSURE(c >= 0 && c <= 3, path << ": nodes/split code " << int(c) << " is not 0..3");
        n.membership.push_back(static_cast<split>(c));
    }
    n.features =
        feature_reader(file, "nodes/features", count, n.info.num_features, {.noun = "node", .ids = n.nodes}).read_all();
    return n;
}

edge_blocks read_owner_shard_edges(const std::string& path)
{
    const auto file = std::make_shared<const h5::file>(h5::file::open(path));
    const auto count = id_count(*file, "edges/src");
    id_count(*file, "edges/dst", static_cast<std::int64_t>(count));
    return {[file, count](const edge_blocks::visitor& visit) {
        const auto src_ds = file->open_dataset("edges/src"), dst_ds = file->open_dataset("edges/dst");
        std::vector<std::int64_t> buf;
        std::vector<node_t> src, dst;
        for (std::size_t at = 0; at < count; at += id_block) {
            src.resize(std::min(id_block, count - at));
            dst.resize(src.size());
            read_id_block(*file, src_ds, "edges/src", at, buf, src);
            read_id_block(*file, dst_ds, "edges/dst", at, buf, dst);
            visit(src, dst);
        }
    }};
}

owner_shard read_owner_shard(const std::string& path)
{
    owner_shard s;
    s.nodes = read_owner_shard_nodes(path);
    const auto file = h5::file::open(path);
    s.src = read_ids(file, "edges/src");
    s.dst = read_ids(file, "edges/dst", static_cast<std::int64_t>(s.src.size()));
    return s;
}

namespace {

split parse_split(std::string_view field, const std::string& where)
{
    for (const auto& [s, name] :
         {std::pair{split::train, "train"}, {split::valid, "valid"}, {split::test, "test"}, {split::none, "none"}})
        if (field == name) return s;
    RETEXO_THROW(where << ": split '" << field << "' is not train, valid, test or none");
}

/// One node line: id, label, split, then the features appended to `values`.
void parse_node_line(std::string_view line, const std::string& where, node_share& s, std::vector<float>& values)
{
    std::string_view fields[3];
    for (auto& f : fields) {
        const auto comma = line.find(',');
        RETEXO_ENSURE(comma != std::string_view::npos,
                      where << ": expected global_id,label,split,features... (" << line.size() << " characters)");
        f = line.substr(0, comma);
        line.remove_prefix(comma + 1);
    }
    s.nodes.push_back(static_cast<node_t>(parse_number<std::int32_t>(fields[0], where)));
    s.membership.push_back(parse_split(fields[2], where));
    const bool unlabelled = fields[1].find_first_not_of(" \t") == std::string_view::npos;
    RETEXO_ENSURE(!unlabelled || s.membership.back() == split::none,
                  where << ": a node in the " << fields[2] << " split needs a label");
    const auto label = unlabelled ? 0 : parse_number<std::int32_t>(fields[1], where);
    RETEXO_ENSURE(label >= 0 && label < s.info.num_classes,
                  where << ": label " << label << " is outside 0.." << s.info.num_classes - 1);
    s.labels.push_back(label);
    const auto width = parse_csv_numbers<float>(line, where, values);
    if (s.nodes.size() == 1) s.info.num_features = static_cast<int>(width);
    RETEXO_ENSURE(static_cast<int>(width) == s.info.num_features,
                  where << ": " << width << " features, the first line has " << s.info.num_features);
}

} // namespace

owner_shard read_owner_rows(const std::string& nodes, const std::string& edges, const graph_info& info,
                            std::optional<feature_storage> storage)
{
    RETEXO_ENSURE(info.num_classes > 0, "the number of classes must be positive, got " << info.num_classes);
    owner_shard out;
    auto& s = out.nodes;
    s.source = nodes;
    s.info = info;
    std::vector<float> values;
    {
        text_reader in(nodes);
        std::string_view line;
        while (in.next(line))
            if (line.find_first_not_of(" \t") != std::string_view::npos) parse_node_line(line, in.where(), s, values);
    }
    RETEXO_ENSURE(!s.nodes.empty(), nodes << ": no node lines");
    {
        std::vector<node_t> ids = s.nodes;
        std::sort(ids.begin(), ids.end());
        const auto twice = std::adjacent_find(ids.begin(), ids.end());
        RETEXO_ENSURE(twice == ids.end(), nodes << ": node " << *twice << " is listed twice");
    }
    matrix_f x(static_cast<Eigen::Index>(s.nodes.size()), s.info.num_features);
    std::copy(values.begin(), values.end(), x.data());
    release(values);
    const auto sparse = csr_matrix::from_dense(x);
    if (storage.value_or(storage_for(sparse.density())) == feature_storage::sparse)
        s.features = sparse;
    else
        s.features = std::move(x);
    text_reader in(edges);
    std::string_view line;
    std::vector<std::int64_t> pair;
    while (in.next(line)) {
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        pair.clear();
        RETEXO_ENSURE(parse_csv_numbers<std::int64_t>(line, in.where(), pair) == 2,
                      in.where() << ": expected src,dst (two global ids)");
        for (auto v : pair)
            RETEXO_ENSURE(v >= 0 && v < (std::int64_t{1} << 31), in.where()
                                                                     << ": node id " << v << " is outside [0, 2^31)");
        out.src.push_back(static_cast<node_t>(pair[0]));
        out.dst.push_back(static_cast<node_t>(pair[1]));
    }
    return out;
}

void write_owner_shards(const std::string& graph_path, std::span<const part_t> assignment, part_t parts,
                        const std::string& out_dir)
{
    const graph_file_reader reader(graph_path);
    const auto& info = reader.info();
    RETEXO_ENSURE(static_cast<node_t>(assignment.size()) == info.num_nodes,
                  "assignment has " << assignment.size() << " entries, graph " << graph_path << " has "
                                    << info.num_nodes << " nodes");
    committed_files done; // none of its files (or the directory it made) left if one fails
    create_output_directory(out_dir, done);
    const csr g = reader.read_csr();
    const auto labels = reader.read_labels();
    const auto membership = reader.read_membership();
    std::vector<std::vector<node_t>> owned(static_cast<std::size_t>(parts));
    for (node_t v = 0; v < info.num_nodes; ++v)
        owned[assignment[v]].push_back(v);
    std::vector<std::unique_ptr<owner_shard_writer>> writers;
    for (part_t p = 0; p < parts; ++p) {
        const auto& ids = owned[p];
        std::vector<std::int32_t> own_labels;
        std::vector<split> own_split;
        std::vector<node_t> src, dst;
        for (node_t v : ids) {
            own_labels.push_back(labels[v]);
            own_split.push_back(membership[v]);
            for (node_t u : g.row(v)) {
                src.push_back(u);
                dst.push_back(v);
            }
        }
        writers.push_back(std::make_unique<owner_shard_writer>(owner_shard_path(out_dir, p), info,
                                                               static_cast<node_t>(ids.size()), reader.storage()));
        writers.back()->write_nodes(ids, own_labels, own_split);
        writers.back()->write_edges(src, dst);
    }
    // One pass over the features in row blocks, each block's rows routed to their owners.
    reader.route_feature_rows(assignment, parts,
                              [&](part_t p, const node_features& rows) { writers[p]->append_features(rows); });
    for (part_t p = 0; p < parts; ++p) {
        writers[static_cast<std::size_t>(p)]->commit();
        done.add(owner_shard_path(out_dir, p));
    }
    done.keep();
}

} // namespace retexo
