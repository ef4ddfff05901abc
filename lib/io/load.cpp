#include <retexo/io/graph_file.hpp>
#include <retexo/io/load.hpp>
#include <retexo/io/partition_files.hpp>

#include <filesystem>
#include <iomanip>
#include <sstream>

namespace fs = std::filesystem;

namespace retexo {

csbm_options data_options::embedded_graph_options()
{
    csbm_options o;
    o.name = "embedded-csbm";
    o.nodes = 20000;
    o.classes = 8;
    o.features = 64;
    o.avg_degree = 12;
    o.homophily = 0.7;
    o.power_law = 2.5;
    o.feature_signal = 1.5;
    o.train_fraction = 0.1;
    o.valid_fraction = 0.1;
    o.test_fraction = 0.8;
    o.seed = 7;
    return o;
}

namespace {

std::vector<part_t> assignment_for(const csr& in_edges, bool directed, node_t num_nodes, const data_options& o,
                                   part_t parts)
{
    partition_options po;
    po.parts = parts;
    po.seed = o.seed;
    po.objective = o.objective;
    if (o.partition == "random" || o.partition == "metis" || o.partition == "blocks") {
        po.method = parse_name<partition_method>(o.partition, "--partition");
    } else {
        RETEXO_ENSURE(fs::exists(o.partition),
                      "--partition: '" << o.partition
                                       << "' is neither random, metis, blocks nor an existing assignment file");
        po.method = partition_method::given;
        po.assignment_file = o.partition;
    }
    RETEXO_ENSURE(in_edges.num_rows() == num_nodes, "internal: CSR size mismatch");
    return make_partition(in_edges, directed, po);
}

} // namespace

void normalize_rows(node_features& x)
{
    if (x.is_sparse()) {
        auto& s = x.sparse();
        for (std::int64_t i = 0; i < s.rows; ++i) {
            float sum = 0;
            for (float v : s.row_values(i))
                sum += std::fabs(v);
            if (sum > 0)
                for (offset_t e = s.offsets[i]; e < s.offsets[i + 1]; ++e)
                    s.values[e] /= sum;
        }
        return;
    }
    auto& d = x.dense();
    for (Eigen::Index i = 0; i < d.rows(); ++i) {
        const float sum = d.row(i).cwiseAbs().sum();
        if (sum > 0) d.row(i) /= sum;
    }
}

local_partition load_rank_partition(const mpi::communicator& comm, const data_options& o)
{
    const part_t parts = comm.size();
    const part_t part = comm.rank();
    local_partition lp;
    comm.checked([&] {
        if (o.data.empty()) {
            const graph g = generate_csbm(o.embedded);
            const auto a = assignment_for(g.in_edges, false, g.num_nodes(), o, parts);
            lp = extract_partition(g, a, parts, part);
        } else if (fs::is_directory(o.data)) {
            const auto m = read_manifest(o.data);
            RETEXO_ENSURE(m.num_parts == parts, o.data << ": holds " << m.num_parts << " partitions but the job has "
                                                       << parts
                                                       << " ranks (mpirun -np must equal the partition count)");
            lp = load_partition(o.data, part);
        } else {
            const graph_file_reader reader(o.data);
            const auto a = assignment_for(reader.read_csr(), reader.info().directed, reader.info().num_nodes, o, parts);
            lp = load_partition_from_graph(o.data, a, parts, part);
        }
    });
    if (o.normalize_features) normalize_rows(lp.features);
    // Every rank must hold a piece of the same assignment.
    const auto hashes = comm.allgather(lp.assignment_hash, purpose::setup);
    for (int r = 0; r < parts; ++r)
        RETEXO_ENSURE(hashes[r] == hashes[0], "rank " << r << " loaded a partition with assignment hash "
                                                      << hash_to_hex(hashes[r]) << " but rank 0 has "
                                                      << hash_to_hex(hashes[0])
                                                      << ": the partition files do not belong together");
    return lp;
}

std::string gather_partition_table(const mpi::communicator& comm, const local_partition& lp)
{
    offset_t cut = 0;
    for (node_t c : lp.in_edges.sources)
        cut += c >= lp.num_owned() ? 1 : 0;
    const std::int64_t mine[7] = {lp.num_owned(),
                                  lp.num_halo(),
                                  lp.in_edges.num_edges(),
                                  cut,
                                  static_cast<std::int64_t>(lp.nodes_in(split::train).size()),
                                  static_cast<std::int64_t>(lp.nodes_in(split::valid).size()),
                                  static_cast<std::int64_t>(lp.nodes_in(split::test).size())};
    const auto all = comm.allgatherv(std::span<const std::int64_t>(mine, 7), purpose::setup);
    std::ostringstream o;
    o << "rank      nodes       halo      in-edges   cut-edges    train    valid     test\n";
    std::int64_t total[7] = {};
    for (int r = 0; r < comm.size(); ++r) {
        o << std::setw(4) << r;
        for (int k = 0; k < 7; ++k) {
            const auto v = all[static_cast<std::size_t>(r) * 7 + k];
            total[k] += v;
            o << std::setw(k == 2 ? 14 : k == 3 ? 12 : k >= 4 ? 9 : 11) << v;
        }
        o << "\n";
    }
    o << " all";
    for (int k = 0; k < 7; ++k)
        o << std::setw(k == 2 ? 14 : k == 3 ? 12 : k >= 4 ? 9 : 11) << total[k];
    o << "\n";
    return o.str();
}

} // namespace retexo
