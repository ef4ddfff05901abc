// The partitioned directory: manifest, assignment and one part file per partition.
#include <retexo/core/atomic_file.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/partition_files.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

namespace fs = std::filesystem;

namespace retexo {

namespace {

nlohmann::json stats_to_json(const partition_stats& s)
{
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : s.parts)
        parts.push_back({{"nodes", p.owned},
                         {"halo", p.halo},
                         {"edges", p.edges},
                         {"cut_edges", p.cut_edges},
                         {"train", p.train},
                         {"valid", p.valid},
                         {"test", p.test}});
    return {{"edge_cut", s.edge_cut}, {"total_halo", s.total_halo}, {"balance", s.balance}, {"parts", parts}};
}

/// Writes one part file: structure at construction, feature rows appended in order (stored
/// as the graph file stores them).
struct part_writer {
    atomic_file out;
    h5::file file;
    std::optional<feature_writer> features;

    /// own_labels, own_split: of the owned nodes, in owned order.
    part_writer(const std::string& path, const partition_structure& s, const graph_info& info, part_t part,
                part_t parts, std::uint64_t hash, std::span<const std::int32_t> own_labels,
                std::span<const split> own_split, feature_storage storage)
        : out(path), file(h5::file::create(out.temp_path(), path))
    {
        file.set_attr("retexo_format", std::string(partition_format_name));
        file.set_attr("format_version", partition_format_version);
        file.set_attr("part", static_cast<std::int64_t>(part));
        file.set_attr("num_parts", static_cast<std::int64_t>(parts));
        file.set_attr("assignment_hash", hash_to_hex(hash));
        file.set_attr("name", info.name);
        file.set_attr("num_nodes", static_cast<std::int64_t>(info.num_nodes));
        file.set_attr("num_edges", static_cast<std::int64_t>(info.num_edges));
        file.set_attr("num_features", static_cast<std::int64_t>(info.num_features));
        file.set_attr("num_classes", static_cast<std::int64_t>(info.num_classes));
        file.set_attr("directed", static_cast<std::int64_t>(info.directed ? 1 : 0));
        const node_t n_own = s.num_owned();
        RETEXO_ENSURE(static_cast<node_t>(own_labels.size()) == n_own && static_cast<node_t>(own_split.size()) == n_own,
                      path << ": " << own_labels.size() << " labels and " << own_split.size() << " split entries for "
                           << n_own << " nodes");
        std::vector<std::int8_t> codes(static_cast<std::size_t>(n_own));
        for (node_t i = 0; i < n_own; ++i)
            codes[i] = static_cast<std::int8_t>(own_split[i]);
        file.write<node_t>("owned/global_ids", s.owned_global);
        file.write<std::int32_t>("owned/labels", own_labels);
        file.write<std::int8_t>("owned/split", codes);
        file.write<offset_t>("csr/offsets", s.in_edges.offsets);
        file.write<node_t>("csr/sources", s.in_edges.sources);
        file.write<node_t>("halo/global_ids", s.halo_global);
        file.write<part_t>("halo/owner", s.halo_owner);
        file.write<offset_t>("halo/in_degree", s.halo_in_degree);
        features.emplace(file, "owned/features", n_own, info.num_features, storage);
    }

    void commit()
    {
        features->finish();
        features.reset();
        file.close();
        out.commit();
    }
};

split to_split(std::int8_t v, const std::string& where)
{
    RETEXO_ENSURE(v >= 0 && v <= 3, where << ": split code " << int(v) << " is not 0..3");
    return static_cast<split>(v);
}

} // namespace

std::string partition_file_path(const std::string& dir, part_t part)
{
    return (fs::path(dir) / ("part" + std::to_string(part) + ".h5")).string();
}

partition_manifest write_partitioned(const std::string& graph_path, std::span<const part_t> assignment,
                                     const partition_options& options, const std::string& out_dir)
{
    const graph_file_reader reader(graph_path);
    const auto& info = reader.info();
    const part_t parts = options.parts;
    RETEXO_ENSURE(static_cast<node_t>(assignment.size()) == info.num_nodes,
                  "assignment has " << assignment.size() << " entries, graph " << graph_path << " has "
                                    << info.num_nodes << " nodes");
    check_no_empty_part(assignment, parts);
    committed_files done; // none of its files (or the directory it made) left if one fails
    create_output_directory(out_dir, done);

    const csr global = reader.read_csr();
    const auto labels = reader.read_labels();
    const auto membership = reader.read_membership();
    const std::uint64_t hash = assignment_hash(assignment, parts);

    partition_manifest m;
    m.graph = info;
    m.num_parts = parts;
    m.method = name_of(options.method);
    m.objective = options.method == partition_method::metis ? name_of(options.objective) : "";
    m.seed = options.seed;
    m.assignment_hash = hash;
    m.source = graph_path;
    m.stats = compute_partition_stats(global, membership, assignment, parts);

    std::vector<std::unique_ptr<part_writer>> writers;
    for (part_t p = 0; p < parts; ++p) {
        const auto s = build_partition_structure(global, assignment, p);
        std::vector<std::int32_t> own_labels;
        std::vector<split> own_split;
        for (node_t v : s.owned_global) {
            own_labels.push_back(labels[v]);
            own_split.push_back(membership[v]);
        }
        writers.push_back(std::make_unique<part_writer>(partition_file_path(out_dir, p), s, info, p, parts, hash,
                                                        own_labels, own_split, reader.storage()));
    }
    // One pass over the features, each block's rows routed to their partitions' files.
    reader.route_feature_rows(assignment, parts, [&](part_t p, const node_features& rows) {
        writers[static_cast<std::size_t>(p)]->features->append(rows);
    });
    for (auto& w : writers) {
        w->commit();
        done.add(w->out.path());
    }
    const auto assignment_path = (fs::path(out_dir) / "assignment.txt").string();
    write_assignment(assignment_path, assignment);
    done.add(assignment_path);
    write_manifest(out_dir, m);
    done.keep();
    return m;
}

void write_manifest(const std::string& out_dir, const partition_manifest& m)
{
    const auto& info = m.graph;
    nlohmann::json j = {{"format", "retexo-partitioned"},
                        {"format_version", partition_format_version},
                        {"graph",
                         {{"name", info.name},
                          {"num_nodes", info.num_nodes},
                          {"num_edges", info.num_edges},
                          {"num_features", info.num_features},
                          {"num_classes", info.num_classes},
                          {"directed", info.directed}}},
                        {"num_parts", m.num_parts},
                        {"method", m.method},
                        {"objective", m.objective},
                        {"seed", m.seed},
                        {"assignment_hash", hash_to_hex(m.assignment_hash)},
                        {"assignment_file", "assignment.txt"},
                        {"source", m.source},
                        {"stats", stats_to_json(m.stats)}};
    write_text_atomic((fs::path(out_dir) / "manifest.json").string(), j.dump(2) + "\n");
}

void write_partition_file(const std::string& path, const local_partition& lp, const graph_file_reader* features_from)
{
    const bool sparse =
        features_from != nullptr ? features_from->storage() == feature_storage::sparse : lp.features.is_sparse();
    part_writer w(path, lp, lp.global, lp.part, lp.num_parts, lp.assignment_hash, lp.labels, lp.membership,
                  sparse ? feature_storage::sparse : feature_storage::dense);
    if (features_from != nullptr)
        features_from->for_feature_rows(lp.owned_global,
                                        [&](const node_features& block) { w.features->append(block); });
    else
        w.features->append(lp.features);
    w.commit();
}

namespace {
/// The whole number j[key], in [least, T's largest] (least >= 0): not wrapped, not rounded.
template <typename T>
T whole(const nlohmann::json& j, const char* key, std::uint64_t least)
{
    const auto& v = j.at(key);
    RETEXO_ENSURE(v.is_number_integer(), key << " must be a whole number, got " << v.dump());
    const auto most = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    const bool negative = !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
    RETEXO_ENSURE(!negative && v.get<std::uint64_t>() >= least && v.get<std::uint64_t>() <= most,
                  key << " " << v.dump() << " outside [" << least << ", " << most << "]");
    return static_cast<T>(v.get<std::uint64_t>());
}
} // namespace

partition_manifest read_manifest(const std::string& dir)
{
    const auto path = (fs::path(dir) / "manifest.json").string();
    RETEXO_ENSURE(fs::is_directory(dir), dir << ": not a directory");
    std::ifstream f(path);
    RETEXO_ENSURE(f.good(), path << ": cannot open (not a partitioned directory from retexo_partition?)");
    partition_manifest m;
    try {
        const auto j = nlohmann::json::parse(f);
        RETEXO_ENSURE(j.at("format").get<std::string>() == "retexo-partitioned",
                      path << ": format is not retexo-partitioned");
        RETEXO_ENSURE(j.at("format_version").get<std::int64_t>() == partition_format_version,
                      path << ": unsupported format_version");
        const auto& g = j.at("graph");
        m.graph.name = g.at("name").get<std::string>();
        m.graph.num_nodes = whole<node_t>(g, "num_nodes", 0);
        m.graph.num_edges = whole<offset_t>(g, "num_edges", 0);
        m.graph.num_features = whole<int>(g, "num_features", 1);
        m.graph.num_classes = whole<int>(g, "num_classes", 1);
        m.graph.directed = g.at("directed").get<bool>();
        m.num_parts = whole<part_t>(j, "num_parts", 1);
        m.method = j.at("method").get<std::string>();
        m.objective = j.value("objective", "");
        m.seed = j.value("seed", std::uint64_t{0});
        m.assignment_hash = hash_from_hex(j.at("assignment_hash").get<std::string>());
        m.source = j.value("source", "");
    } catch (const nlohmann::json::exception& e) {
        RETEXO_THROW(path << ": invalid manifest: " << e.what());
    } catch (const error& e) {
        RETEXO_THROW(path << ": " << e.what());
    }
    return m;
}

local_partition load_partition(const std::string& dir, part_t part)
{
    const auto m = read_manifest(dir);
    RETEXO_ENSURE(part >= 0 && part < m.num_parts,
                  dir << ": has " << m.num_parts << " partitions, no partition " << part);
    const auto path = partition_file_path(dir, part);
    const auto file = h5::file::open(path);
    RETEXO_ENSURE(file.has_attr("retexo_format") && file.attr_string("retexo_format") == partition_format_name,
                  path << ": not a retexo partition file");
    RETEXO_ENSURE(file.attr_int("format_version") == partition_format_version,
                  path << ": unsupported partition format version");
    RETEXO_ENSURE(file.attr_int("part") == part,
                  path << ": holds partition " << file.attr_int("part") << ", expected " << part);
    RETEXO_ENSURE(file.attr_int("num_parts") == m.num_parts,
                  path << ": made for " << file.attr_int("num_parts") << " partitions, manifest says " << m.num_parts);
    local_partition lp;
    lp.part = part;
    lp.num_parts = m.num_parts;
    lp.assignment_hash = hash_from_hex(file.attr_string("assignment_hash"));
    RETEXO_ENSURE(lp.assignment_hash == m.assignment_hash,
                  path << ": assignment hash " << hash_to_hex(lp.assignment_hash) << " does not match manifest.json ("
                       << hash_to_hex(m.assignment_hash) << "): the partition files come from different runs");
    lp.global = m.graph;
    RETEXO_ENSURE(file.attr_int("num_features") == m.graph.num_features &&
                      file.attr_int("num_nodes") == m.graph.num_nodes,
                  path << ": graph sizes differ from manifest.json");
    RETEXO_ENSURE(file.attr_int("num_classes") == m.graph.num_classes,
                  path << ": made for " << file.attr_int("num_classes") << " classes, manifest.json says "
                       << m.graph.num_classes);

    lp.owned_global = file.read_vector<node_t>("owned/global_ids");
    const auto n_own = static_cast<std::int64_t>(lp.owned_global.size());
    RETEXO_ENSURE(n_own > 0, path << ": partition " << part << " is empty");
    lp.labels = file.read_vector<std::int32_t>("owned/labels", n_own);
    const auto codes = file.read_vector<std::int8_t>("owned/split", n_own);
    lp.membership.reserve(codes.size());
    for (auto c : codes)
        lp.membership.push_back(to_split(c, path));
    lp.in_edges.offsets = file.read_vector<offset_t>("csr/offsets", n_own + 1);
    lp.in_edges.sources = file.read_vector<node_t>("csr/sources");
    lp.halo_global = file.read_vector<node_t>("halo/global_ids");
    const auto n_halo = static_cast<std::int64_t>(lp.halo_global.size());
    lp.halo_owner = file.read_vector<part_t>("halo/owner", n_halo);
    lp.halo_in_degree = file.read_vector<offset_t>("halo/in_degree", n_halo);
    lp.features =
        feature_reader(file, "owned/features", n_own, m.graph.num_features, {.noun = "node", .ids = lp.owned_global})
            .read_all();

    // Consistency of what was read.
    validate_csr(lp.in_edges, static_cast<node_t>(n_own + n_halo), path);
    for (std::int64_t i = 0; i < n_own; ++i) {
        RETEXO_ENSURE(lp.owned_global[i] >= 0 && lp.owned_global[i] < m.graph.num_nodes &&
                          (i == 0 || lp.owned_global[i - 1] < lp.owned_global[i]),
                      path << ": owned/global_ids must be ascending ids in [0, " << m.graph.num_nodes << ")");
        RETEXO_ENSURE(lp.labels[i] >= 0 && lp.labels[i] < m.graph.num_classes,
                      path << ": label " << lp.labels[i] << " of node " << lp.owned_global[i] << " is outside 0.."
                           << m.graph.num_classes - 1);
    }
    for (std::int64_t i = 0; i < n_halo; ++i)
        RETEXO_ENSURE(lp.halo_owner[i] >= 0 && lp.halo_owner[i] < m.num_parts && lp.halo_owner[i] != part &&
                          lp.halo_global[i] >= 0 && lp.halo_global[i] < m.graph.num_nodes &&
                          (i == 0 || std::make_pair(lp.halo_owner[i - 1], lp.halo_global[i - 1]) <
                                         std::make_pair(lp.halo_owner[i], lp.halo_global[i])),
                      path << ": halo entry " << i << " is invalid (owner " << lp.halo_owner[i] << ", node "
                           << lp.halo_global[i] << ")");
    // A halo node's in-degree counts at least its edges to this part's nodes where the graph is
    // undirected (each such edge is also an in-edge of the halo node).
    std::vector<offset_t> uses(static_cast<std::size_t>(n_halo), 0);
    for (node_t c : lp.in_edges.sources)
        if (c >= n_own) ++uses[static_cast<std::size_t>(c - n_own)];
    for (std::int64_t i = 0; i < n_halo; ++i) {
        const offset_t at_least = m.graph.directed ? 0 : uses[static_cast<std::size_t>(i)];
        RETEXO_ENSURE(lp.halo_in_degree[i] >= at_least,
                      path << ": halo/in_degree of node " << lp.halo_global[i] << " is " << lp.halo_in_degree[i]
                           << ", but it has " << uses[static_cast<std::size_t>(i)] << " edge(s) to this part's nodes"
                           << (m.graph.directed ? "" : " in an undirected graph"));
        RETEXO_ENSURE(lp.halo_in_degree[i] < m.graph.num_nodes,
                      path << ": halo/in_degree of node " << lp.halo_global[i] << " is " << lp.halo_in_degree[i]
                           << ", more than the graph's other " << m.graph.num_nodes - 1 << " nodes");
    }
    return lp;
}

} // namespace retexo
