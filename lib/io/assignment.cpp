// Assignment files: the reader (streamed, one slice kept, every line checked), the atomic
// writer, and make_partition, which computes an assignment or reads the given one.
#include <retexo/core/atomic_file.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/text_reader.hpp>
#include <retexo/partition/ptscotch.hpp>

#include <cstdio>

namespace retexo {

std::vector<part_t> read_assignment(const std::string& path, node_t num_nodes, part_t parts)
{
    return read_assignment(path, num_nodes, parts, 0, num_nodes);
}

namespace {
/// read_assignment on a reader of the file or of the text in memory.
std::vector<part_t> read_assignment_from(text_reader& in, node_t num_nodes, part_t parts, node_t first, node_t count)
{
    const std::string& path = in.path();
    std::vector<part_t> a;
    a.reserve(static_cast<std::size_t>(count));
    node_t lines = 0;
    std::string_view line;
    while (in.next(line)) {
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        const auto p = parse_number<std::int64_t>(line, in.where());
        RETEXO_ENSURE(p >= 0 && p < parts, in.where() << ": partition id " << p << " is outside [0, " << parts << ")");
        RETEXO_ENSURE(lines < num_nodes,
                      path << ": more than " << num_nodes << " lines; the graph has " << num_nodes << " nodes");
        if (lines >= first && lines - first < count) a.push_back(static_cast<part_t>(p));
        ++lines;
    }
    RETEXO_ENSURE(lines == num_nodes, path << ": " << lines << " lines, but the graph has " << num_nodes
                                           << " nodes (one partition id per node expected)");
    return a;
}
} // namespace

std::vector<part_t> read_assignment(const std::string& path, node_t num_nodes, part_t parts, node_t first, node_t count)
{
    text_reader in(path);
    return read_assignment_from(in, num_nodes, parts, first, count);
}

std::vector<part_t> read_assignment(const std::string& name, std::span<const char> bytes, node_t num_nodes,
                                    part_t parts, node_t first, node_t count)
{
    text_reader in(name, bytes);
    return read_assignment_from(in, num_nodes, parts, first, count);
}

void write_assignment(const std::string& path, std::span<const part_t> assignment)
{
    atomic_file out(path);
    {
        std::FILE* f = std::fopen(out.temp_path().c_str(), "wb");
        RETEXO_ENSURE(f != nullptr, path << ": cannot open for writing");
        bool ok = true;
        for (part_t p : assignment)
            ok = ok && std::fprintf(f, "%d\n", p) > 0;
        ok = (std::fclose(f) == 0) && ok;
        RETEXO_ENSURE(ok, path << ": write failed");
    }
    out.commit();
}

std::vector<part_t> make_partition(const csr& in_edges, bool directed, const partition_options& options)
{
    const node_t n = in_edges.num_rows();
    std::vector<part_t> a;
    switch (options.method) {
    case partition_method::random:
        a = partition_random(n, options.parts, options.seed);
        break;
    case partition_method::blocks:
        a = partition_blocks(n, options.parts);
        break;
    case partition_method::metis:
        a = partition_metis(in_edges, directed, options.parts, options.objective, options.seed);
        break;
    case partition_method::scotch:
        a = partition_ptscotch(mpi::communicator(MPI_COMM_SELF), csr_slice{0, n, in_edges}, directed, options.parts,
                               options.seed);
        break;
    case partition_method::given:
        RETEXO_ENSURE(!options.assignment_file.empty(), "--assignment FILE is required with --method given");
        a = read_assignment(options.assignment_file, n, options.parts);
        break;
    }
    check_no_empty_part(a, options.parts);
    return a;
}

} // namespace retexo
