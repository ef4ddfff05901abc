// Distributed k-way partitioning with PT-Scotch (64-bit SCOTCH_Num build, scotch-int64).
#include <retexo/partition/ptscotch.hpp>

#include <ptscotch.h>

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

namespace retexo {

namespace {

constexpr const char* who = "retexo::partition_ptscotch";

static_assert(std::is_integral_v<SCOTCH_Num> && std::is_signed_v<SCOTCH_Num>, "SCOTCH_Num is a signed integer");

#ifdef NDEBUG
constexpr bool debug_build = false;
#else
constexpr bool debug_build = true;
#endif

/// value as a SCOTCH_Num, or an error naming what would overflow.
template <typename T>
SCOTCH_Num to_scotch_num(T value, const char* what)
{
    static_assert(std::is_integral_v<T>);
    RETEXO_ENSURE(value >= 0 && static_cast<std::uint64_t>(value) <=
                                    static_cast<std::uint64_t>(std::numeric_limits<SCOTCH_Num>::max()),
                  who << ": " << what << " = " << value << " overflows PT-Scotch's " << 8 * sizeof(SCOTCH_Num)
                      << "-bit SCOTCH_Num");
    return static_cast<SCOTCH_Num>(value);
}

/// Agree on the return code of a PT-Scotch call (collective): if it failed on any rank, every
/// rank throws an error naming the call.
void scotch_ok(const mpi::communicator& comm, int rc, const char* call)
{
    std::string err;
    if (rc != 0)
        err = std::string(who) + ": " + call + " failed (return code " + std::to_string(rc) +
              "; PT-Scotch printed the reason on stderr)";
    comm.agree(err, purpose::setup);
}

/// PT-Scotch objects freed on scope exit (the Exit functions are local, not collective).
struct scotch_context {
    SCOTCH_Context ctx;
    bool live = false;
    ~scotch_context()
    {
        if (live) SCOTCH_contextExit(&ctx);
    }
};
struct scotch_dgraph {
    SCOTCH_Dgraph graph;
    bool live = false;
    ~scotch_dgraph()
    {
        if (live) SCOTCH_dgraphExit(&graph);
    }
};
struct scotch_strat {
    SCOTCH_Strat strat;
    bool live = false;
    ~scotch_strat()
    {
        if (live) SCOTCH_stratExit(&strat);
    }
};

/// The rank whose slice holds global row v (starts: size() + 1 first rows, the last = n).
/// Ranks with empty slices share their start with the next rank; the owner is the last rank
/// starting at or before v.
int owner_of(std::span<const node_t> starts, node_t v)
{
    return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), v) - starts.begin()) - 1;
}

/// Sort each row of g, drop repeated entries and the self loop (row i is global row first + i).
void sort_dedupe_rows(csr& g, node_t first)
{
    std::vector<offset_t> out_offsets(g.offsets.size(), 0);
    offset_t at = 0;
    for (node_t i = 0; i < g.num_rows(); ++i) {
        const auto b = g.sources.begin() + g.offsets[i], e = g.sources.begin() + g.offsets[i + 1];
        std::sort(b, e);
        const auto end = std::unique(b, e);
        for (auto it = b; it != end; ++it)
            if (*it != first + i) g.sources[at++] = *it;
        out_offsets[i + 1] = at;
    }
    g.sources.resize(static_cast<std::size_t>(at));
    g.offsets = std::move(out_offsets);
}

/// This rank's rows of the symmetric graph without self loops or repeated arcs (collective
/// when directed: the reverse arcs travel to the owners of their rows).
csr symmetric_rows(const mpi::communicator& comm, const csr_slice& mine, bool directed, std::span<const node_t> starts)
{
    const node_t first = mine.first_row;
    const node_t rows = mine.in_edges.num_rows();
    const csr& in = mine.in_edges;
    csr adj;
    if (!directed) {
        comm.checked([&] {
            adj = in;
            sort_dedupe_rows(adj, first);
        });
        return adj;
    }
    // Arc u -> v (v a row here, u its source) also gives v -> u: row u, held by owner_of(u),
    // gains v.  Sent packed as (u << 32 | v).
    std::vector<std::uint64_t> send;
    std::vector<std::int64_t> send_offsets(static_cast<std::size_t>(comm.size()) + 1, 0);
    comm.checked([&] {
        for (node_t i = 0; i < rows; ++i)
            for (node_t u : in.row(i))
                if (u != first + i) ++send_offsets[owner_of(starts, u) + 1];
        for (int r = 0; r < comm.size(); ++r) {
            RETEXO_ENSURE(send_offsets[r + 1] <= std::numeric_limits<int>::max(), who << ": " << send_offsets[r + 1]
                                                                                      << " reverse arcs for rank " << r
                                                                                      << " exceed an MPI count");
            send_offsets[r + 1] += send_offsets[r];
        }
        send.resize(static_cast<std::size_t>(send_offsets.back()));
        std::vector<std::int64_t> fill(send_offsets.begin(), send_offsets.end() - 1);
        for (node_t i = 0; i < rows; ++i)
            for (node_t u : in.row(i))
                if (u != first + i)
                    send[fill[owner_of(starts, u)]++] =
                        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(u)) << 32) |
                        static_cast<std::uint32_t>(first + i);
    });
    const auto received = comm.exchange<std::uint64_t>(send, send_offsets, purpose::setup);
    release(send);
    comm.checked([&] {
        adj.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
        for (node_t i = 0; i < rows; ++i)
            adj.offsets[i + 1] = in.degree(i);
        for (std::uint64_t x : received) {
            const auto row = static_cast<std::int64_t>(x >> 32) - first;
            RETEXO_ENSURE(row >= 0 && row < rows, who << ": received a reverse arc for row " << (x >> 32)
                                                      << ", which is not among this rank's rows");
            ++adj.offsets[row + 1];
        }
        for (node_t i = 0; i < rows; ++i)
            adj.offsets[i + 1] += adj.offsets[i];
        adj.sources.resize(static_cast<std::size_t>(adj.offsets.back()));
        std::vector<offset_t> fill(adj.offsets.begin(), adj.offsets.end() - 1);
        for (node_t i = 0; i < rows; ++i)
            for (node_t u : in.row(i))
                adj.sources[fill[i]++] = u;
        for (std::uint64_t x : received)
            adj.sources[fill[static_cast<std::int64_t>(x >> 32) - first]++] =
                static_cast<node_t>(static_cast<std::uint32_t>(x & 0xffffffffu));
        sort_dedupe_rows(adj, first);
    });
    return adj;
}

/// 1. Local checks, agreed so that every rank throws together.
void check_arguments(const mpi::communicator& comm, const csr_slice& mine, part_t parts,
                     const ptscotch_options& options)
{
    const node_t rows = mine.in_edges.num_rows();
    comm.checked([&] {
        RETEXO_ENSURE(parts >= 1, who << ": the number of parts must be positive, got " << parts);
        RETEXO_ENSURE(options.imbalance >= 0 && options.imbalance < 1,
                      who << ": imbalance must be in [0, 1), got " << options.imbalance);
        RETEXO_ENSURE(mine.num_nodes >= 0 && mine.first_row >= 0 && rows >= 0 &&
                          static_cast<std::int64_t>(mine.first_row) + rows <= mine.num_nodes,
                      who << ": rows [" << mine.first_row << ", " << static_cast<std::int64_t>(mine.first_row) + rows
                          << ") are not within the graph's " << mine.num_nodes << " nodes");
        validate_csr(mine.in_edges, mine.num_nodes,
                     std::string(who) + ": rank " + std::to_string(comm.rank()) + "'s slice");
        // Debian installs 32- and 64-bit builds with the same sonames: a binary without the rpath
        // to scotch-int64 loads the 32-bit library, which would misread every array.
        RETEXO_ENSURE(SCOTCH_numSizeof() == static_cast<int>(sizeof(SCOTCH_Num)),
                      who << ": the loaded PT-Scotch library has a " << 8 * SCOTCH_numSizeof()
                          << "-bit SCOTCH_Num, retexo was built against a " << 8 * sizeof(SCOTCH_Num)
                          << "-bit one (the binary lacks the rpath to the scotch-int64 library folder?)");
    });
}

/// 2. The slices must be consistent: contiguous in rank order, covering the graph, with the
/// same arguments everywhere.  Every rank checks the same gathered table.  Returns the first
/// row of every rank's slice, then n.
std::vector<node_t> agree_slices(const mpi::communicator& comm, const csr_slice& mine, bool directed, part_t parts)
{
    const node_t rows = mine.in_edges.num_rows();
    const std::int64_t desc[] = {mine.first_row, rows, mine.num_nodes, parts, directed ? 1 : 0};
    const auto all = comm.allgatherv<std::int64_t>(desc, purpose::setup);
    const node_t n = mine.num_nodes;
    std::vector<node_t> starts(static_cast<std::size_t>(comm.size()) + 1, 0);
    // Every rank checks every rank's values: a mismatch fails every rank (an agreed error).
    for (int r = 0; r < comm.size(); ++r) {
        const std::int64_t* d = &all[5 * static_cast<std::size_t>(r)];
        RETEXO_ENSURE_AGREED(d[2] == n && d[3] == parts && d[4] == desc[4],
                             who << ": rank " << r << " has num_nodes " << d[2] << ", parts " << d[3] << ", directed "
                                 << d[4] << ", but rank " << comm.rank() << " has " << n << ", " << parts << ", "
                                 << desc[4] << " (they must agree)");
        RETEXO_ENSURE_AGREED(d[0] == starts[r], who << ": rank " << r << "'s slice starts at row " << d[0]
                                                    << ", but the slices before it end at row " << starts[r]
                                                    << " (slices must be contiguous in rank order)");
        starts[r + 1] = static_cast<node_t>(d[0] + d[1]);
    }
    RETEXO_ENSURE_AGREED(starts.back() == n,
                         who << ": the slices cover rows [0, " << starts.back() << ") of a graph of " << n << " nodes");
    RETEXO_ENSURE_AGREED(parts <= n,
                         who << ": " << parts << " parts for a graph of " << n << " nodes would leave a part empty");
    return starts;
}

/// This rank's rows as PT-Scotch's distributed graph arrays.
struct scotch_arrays {
    std::vector<SCOTCH_Num> vertloctab, edgeloctab;
};

/// 3. The symmetric adjacency of this rank's rows, as PT-Scotch arrays (base 0, global ids:
/// PT-Scotch numbers vertices consecutively in rank order, as the slices are).
scotch_arrays build_arrays(const mpi::communicator& comm, const csr_slice& mine, bool directed,
                           std::span<const node_t> starts)
{
    scotch_arrays a;
    const csr adj = symmetric_rows(comm, mine, directed, starts);
    comm.checked([&] {
        to_scotch_num(static_cast<std::int64_t>(mine.num_nodes), "the number of nodes");
        to_scotch_num(adj.num_edges(), "this rank's number of arcs");
        a.vertloctab.assign(adj.offsets.begin(), adj.offsets.end());
        // At least one element: PT-Scotch rejects a null edge array on ranks without arcs.
        a.edgeloctab.resize(std::max<std::size_t>(adj.sources.size(), 1));
        std::copy(adj.sources.begin(), adj.sources.end(), a.edgeloctab.begin());
    });
    return a;
}

/// 4. PT-Scotch: a context with one thread (deterministic, and no threads competing with the
/// ranks for cores) and its own random generator seeded with `seed`.  Returns the part of
/// each of this rank's rows (at least one element).
std::vector<SCOTCH_Num> run_scotch(const mpi::communicator& comm, scotch_arrays& a, node_t rows, part_t parts,
                                   std::uint64_t seed, const ptscotch_options& options)
{
    const SCOTCH_Num vertlocnbr = rows;
    const SCOTCH_Num edgelocnbr = a.vertloctab.back();

    scotch_context context;
    scotch_ok(comm, SCOTCH_contextInit(&context.ctx), "SCOTCH_contextInit");
    context.live = true;
    scotch_ok(comm, SCOTCH_contextOptionSetNum(&context.ctx, SCOTCH_OPTIONNUMDETERMINISTIC, 1),
              "SCOTCH_contextOptionSetNum(DETERMINISTIC)");
    scotch_ok(comm, SCOTCH_contextOptionSetNum(&context.ctx, SCOTCH_OPTIONNUMRANDOMFIXEDSEED, 1),
              "SCOTCH_contextOptionSetNum(RANDOMFIXEDSEED)");
    scotch_ok(comm, SCOTCH_contextThreadSpawn(&context.ctx, 1, nullptr), "SCOTCH_contextThreadSpawn");
    scotch_ok(comm, SCOTCH_contextRandomClone(&context.ctx), "SCOTCH_contextRandomClone");
    SCOTCH_contextRandomSeed(&context.ctx, static_cast<SCOTCH_Num>(seed & 0x7fffffffffffffffULL));
    SCOTCH_contextRandomReset(&context.ctx);

    scotch_dgraph graph;
    scotch_ok(comm, SCOTCH_dgraphInit(&graph.graph, comm.get()), "SCOTCH_dgraphInit");
    graph.live = true;
    scotch_ok(comm,
              SCOTCH_dgraphBuild(&graph.graph, 0, vertlocnbr, vertlocnbr, a.vertloctab.data(), a.vertloctab.data() + 1,
                                 nullptr, nullptr, edgelocnbr, edgelocnbr, a.edgeloctab.data(), nullptr, nullptr),
              "SCOTCH_dgraphBuild");
    if (options.check_graph || debug_build) scotch_ok(comm, SCOTCH_dgraphCheck(&graph.graph), "SCOTCH_dgraphCheck");
    scotch_dgraph bound; // the graph seen through the context (SCOTCH_contextBindDgraph initialises it)
    scotch_ok(comm, SCOTCH_contextBindDgraph(&context.ctx, &graph.graph, &bound.graph), "SCOTCH_contextBindDgraph");
    bound.live = true;

    scotch_strat strat;
    scotch_ok(comm, SCOTCH_stratInit(&strat.strat), "SCOTCH_stratInit");
    strat.live = true;
    scotch_ok(comm,
              SCOTCH_stratDgraphMapBuild(&strat.strat, SCOTCH_STRATQUALITY, comm.size(), parts, options.imbalance),
              "SCOTCH_stratDgraphMapBuild");

    std::vector<SCOTCH_Num> partloctab(std::max<std::size_t>(static_cast<std::size_t>(rows), 1), 0);
    scotch_ok(comm, SCOTCH_dgraphPart(&bound.graph, parts, &strat.strat, partloctab.data()), "SCOTCH_dgraphPart");
    return partloctab;
}

/// 5. The assignment; every part must have a node (one all-reduce of the part sizes).
std::vector<part_t> check_assignment(const mpi::communicator& comm, const csr_slice& mine,
                                     std::span<const SCOTCH_Num> partloctab, part_t parts)
{
    const node_t rows = mine.in_edges.num_rows();
    std::vector<part_t> assignment(static_cast<std::size_t>(rows));
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), 0);
    comm.checked([&] {
        for (node_t i = 0; i < rows; ++i) {
            const SCOTCH_Num p = partloctab[i];
            RETEXO_ENSURE(p >= 0 && p < parts, who << ": SCOTCH_dgraphPart put row " << mine.first_row + i
                                                   << " in part " << p << ", outside [0, " << parts << ")");
            assignment[i] = static_cast<part_t>(p);
            ++sizes[p];
        }
    });
    comm.allreduce<std::int64_t>(sizes, MPI_SUM, purpose::setup);
    const auto empty = std::find(sizes.begin(), sizes.end(), 0);
    RETEXO_ENSURE(empty == sizes.end(), who << ": PT-Scotch left part " << empty - sizes.begin() << " of " << parts
                                            << " empty (" << mine.num_nodes << " nodes)");
    return assignment;
}

} // namespace

std::vector<part_t> partition_ptscotch(const mpi::communicator& comm, const csr_slice& mine, bool directed,
                                       part_t parts, std::uint64_t seed)
{
    return partition_ptscotch(comm, mine, directed, parts, seed, ptscotch_options{});
}

std::vector<part_t> partition_ptscotch(const mpi::communicator& comm, const csr_slice& mine, bool directed,
                                       part_t parts, std::uint64_t seed, const ptscotch_options& options)
{
    const node_t rows = mine.in_edges.num_rows();
    check_arguments(comm, mine, parts, options);
    const std::vector<node_t> starts = agree_slices(comm, mine, directed, parts);
    if (parts == 1) return std::vector<part_t>(static_cast<std::size_t>(rows), 0);
    std::vector<SCOTCH_Num> partloctab;
    {
        scotch_arrays arrays = build_arrays(comm, mine, directed, starts);
        partloctab = run_scotch(comm, arrays, rows, parts, seed, options);
    }
    return check_assignment(comm, mine, partloctab, parts);
}

} // namespace retexo
