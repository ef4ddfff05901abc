// The placement check: the rules on every rank's record (rule (b) as a max flow ranks -> CPUs),
// the record's word form, reading this process's placement, and the collective check.
#include <retexo/comm/placement.hpp>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <queue>
#include <sstream>

namespace retexo {

namespace {

/// Sort and drop repeats.
void sort_unique(std::vector<int>& v)
{
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// Index of CPU c in the sorted, unique `cpu_ids` (c is there).
int index_of(const std::vector<int>& cpu_ids, int c)
{
    return static_cast<int>(std::lower_bound(cpu_ids.begin(), cpu_ids.end(), c) - cpu_ids.begin());
}

/// A flow network with integer capacities; max_flow by Edmonds-Karp (at most sum(T) augmenting
/// paths on a small graph).
class flow_network {
public:
    explicit flow_network(int nodes) : adj_(static_cast<std::size_t>(nodes)) {}

    void add_edge(int u, int v, int cap)
    {
        adj_[u].push_back(static_cast<int>(edges_.size()));
        edges_.push_back({v, cap});
        adj_[v].push_back(static_cast<int>(edges_.size()));
        edges_.push_back({u, 0});
    }

    /// Pushes the most flow from s to t; the residual network stays for reachable().
    long long max_flow(int s, int t)
    {
        long long flow = 0;
        for (;;) {
            reachable(s);
            if (parent_edge_[t] < 0) return flow;
            int push = INT_MAX;
            for (int v = t; v != s; v = edges_[parent_edge_[v] ^ 1].to)
                push = std::min(push, edges_[parent_edge_[v]].cap);
            for (int v = t; v != s; v = edges_[parent_edge_[v] ^ 1].to) {
                edges_[parent_edge_[v]].cap -= push;
                edges_[parent_edge_[v] ^ 1].cap += push;
            }
            flow += push;
        }
    }

    /// The nodes s reaches in the residual network (after max_flow: the min cut's source side).
    std::vector<char> reachable(int s)
    {
        parent_edge_.assign(adj_.size(), -1);
        std::vector<char> seen(adj_.size(), 0);
        std::queue<int> q;
        q.push(s);
        seen[s] = 1;
        while (!q.empty()) {
            const int u = q.front();
            q.pop();
            for (int e : adj_[u])
                if (edges_[e].cap > 0 && seen[edges_[e].to] == 0) {
                    seen[edges_[e].to] = 1;
                    parent_edge_[edges_[e].to] = e;
                    q.push(edges_[e].to);
                }
        }
        return seen;
    }

private:
    struct edge {
        int to, cap;
    };
    std::vector<edge> edges_; ///< an edge and its reverse at 2i and 2i + 1
    std::vector<std::vector<int>> adj_;
    std::vector<int> parent_edge_; ///< of the last reachable(): the edge each node was reached by
};

/// The ranks members[i] with crowded[i] set, split into groups that share CPUs (union-find over
/// ranks), each group's members and the groups in the order of `members`.
std::vector<std::vector<int>> split_by_shared_cpus(const std::vector<rank_placement>& ranks,
                                                   const std::vector<int>& members, const std::vector<int>& cpu_ids,
                                                   const std::vector<char>& crowded)
{
    const int n = static_cast<int>(members.size());
    std::vector<int> group(static_cast<std::size_t>(n));
    std::iota(group.begin(), group.end(), 0);
    auto find = [&](int x) {
        while (group[x] != x)
            x = group[x] = group[group[x]];
        return x;
    };
    std::vector<int> owner(cpu_ids.size(), -1);
    for (int i = 0; i < n; ++i) {
        if (crowded[i] == 0) continue;
        for (int c : ranks[members[i]].cpus) {
            const auto ci = static_cast<std::size_t>(index_of(cpu_ids, c));
            if (owner[ci] < 0)
                owner[ci] = i;
            else
                group[find(i)] = find(owner[ci]);
        }
    }
    std::vector<std::vector<int>> out;
    std::vector<int> slot(static_cast<std::size_t>(n), -1);
    for (int i = 0; i < n; ++i) {
        if (crowded[i] == 0) continue;
        const int g = find(i);
        if (slot[g] < 0) {
            slot[g] = static_cast<int>(out.size());
            out.emplace_back();
        }
        out[slot[g]].push_back(members[i]);
    }
    return out;
}

/// "0,1,2,5" (at most 16 ranks named).
std::string rank_list(const std::vector<int>& ranks)
{
    std::string s;
    for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) {
        if (i != 0) s += ',';
        s += std::to_string(ranks[i]);
    }
    if (ranks.size() > 16) s += ",... (" + std::to_string(ranks.size()) + " ranks)";
    return s;
}

/// Rule (a): a warning for each of the first 4 ranks with more threads than CPUs in their mask,
/// then one line for the others; marks every such rank in `alone`.
void warn_threads_over_cpus(const std::vector<rank_placement>& ranks, std::vector<std::string>& out,
                            std::vector<char>& alone)
{
    int shown = 0, more = 0;
    alone.assign(ranks.size(), 0);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        const auto& p = ranks[r];
        const int c = static_cast<int>(p.cpus.size());
        if (c == 0 || p.threads <= c) continue;
        alone[r] = 1;
        if (shown++ >= 4) {
            ++more;
            continue;
        }
        const int t = p.threads;
        out.push_back("warning: rank " + std::to_string(r) + " runs " + std::to_string(t) + " OpenMP threads on " +
                      std::to_string(c) + " CPU(s) (affinity mask " + cpu_list(p.cpus) +
                      (p.omp_bind ? ", OMP_PROC_BIND/OMP_PLACES in effect" : "") +
                      "): set OMP_NUM_THREADS=" + std::to_string(c) +
                      ", or start with mpi_scripts/retexo_run.sh / mpirun --bind-to none / --map-by slot:PE=" +
                      std::to_string(t));
    }
    if (more > 0) out.push_back("warning: ... and " + std::to_string(more) + " more rank(s) alike");
}

/// The ranks of one host and what rules (b) and (c) need of them.
struct host_ranks {
    std::string name;
    std::vector<int> members; ///< rank ids, ascending
    int cpus = 0;             ///< CPUs the job may use: the most any rank reports, at least those in the masks
    long long threads = 0;    ///< over its ranks
    bool any_set = false, any_bind = false;
    std::vector<int> used; ///< CPUs in any of its ranks' masks

    /// CPUs per rank when the host's CPUs are shared out evenly (at least 1).
    int per_rank() const { return std::max(1, cpus / static_cast<int>(members.size())); }
};

/// The ranks by host, hosts in the order of their first rank.
std::vector<host_ranks> ranks_by_host(const std::vector<rank_placement>& ranks)
{
    std::vector<host_ranks> hosts;
    for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
        const auto& p = ranks[r];
        auto it = std::find_if(hosts.begin(), hosts.end(), [&](const host_ranks& h) { return h.name == p.host; });
        if (it == hosts.end()) {
            hosts.push_back({.name = p.host});
            it = hosts.end() - 1;
        }
        it->members.push_back(r);
        it->cpus = std::max(it->cpus, p.host_cpus);
        it->threads += p.threads;
        it->any_set = it->any_set || p.threads_set;
        it->any_bind = it->any_bind || p.omp_bind;
        it->used.insert(it->used.end(), p.cpus.begin(), p.cpus.end());
    }
    for (auto& h : hosts) {
        sort_unique(h.used);
        h.cpus = std::max(h.cpus, static_cast<int>(h.used.size()));
    }
    return hosts;
}

/// Rule (b)'s warning for one crowded group of ranks of host h.
std::string crowded_warning(const std::vector<rank_placement>& ranks, const host_ranks& h, const std::vector<int>& g)
{
    long long threads = 0;
    bool bind = false;
    std::vector<int> cpus;
    for (int r : g) {
        threads += ranks[r].threads;
        bind = bind || ranks[r].omp_bind;
        cpus.insert(cpus.end(), ranks[r].cpus.begin(), ranks[r].cpus.end());
    }
    sort_unique(cpus);
    return "warning: ranks " + rank_list(g) + " on host " + h.name + " run " + std::to_string(threads) +
           " OpenMP threads in all on the same " + std::to_string(cpus.size()) + " CPU(s) (" + cpu_list(cpus) +
           ") while the host has " + std::to_string(h.cpus) + " CPUs for its " + std::to_string(h.threads) +
           " threads" +
           (bind ? "; OMP_PROC_BIND/OMP_PLACES pin each rank's threads from the first CPU of its "
                   "mask, so unset them where the launcher does not bind each rank to its own cores"
                 : "") +
           (static_cast<int>(h.members.size()) > h.cpus
                ? ": with more ranks than CPUs let them share all CPUs (mpi_scripts/retexo_run.sh, "
                  "mpirun --bind-to none)"
                : ": give each rank its own cores (mpi_scripts/retexo_run.sh, mpirun --map-by slot:PE=" +
                      std::to_string(h.per_rank()) + " --bind-to core, srun --cpu-bind=cores where Slurm binds tasks)");
}

/// Rule (c)'s note for host h.
std::string idle_cpus_note(const host_ranks& h)
{
    const int per_rank = h.per_rank();
    return "note: the " + std::to_string(h.members.size()) + " rank(s) on host " + h.name + " run " +
           std::to_string(h.threads) + " OpenMP thread(s) on " + std::to_string(h.used.size()) + " of its " +
           std::to_string(h.cpus) +
           " CPUs (the launcher bound each rank to a few CPUs and OMP_NUM_THREADS is unset): start "
           "with mpi_scripts/retexo_run.sh, or set OMP_NUM_THREADS=" +
           std::to_string(per_rank) + " and mpirun --map-by slot:PE=" + std::to_string(per_rank) + " --bind-to core";
}

/// Rule (d)'s warning for host h.
std::string oversubscribed_warning(const host_ranks& h)
{
    return "warning: the " + std::to_string(h.members.size()) + " rank(s) on host " + h.name + " run " +
           std::to_string(h.threads) + " OpenMP threads on its " + std::to_string(h.cpus) +
           " CPUs, more than one per CPU, so they time-share them (OMP_NUM_THREADS asks for it): set "
           "OMP_NUM_THREADS=" +
           std::to_string(h.per_rank()) + ", or start with mpi_scripts/retexo_run.sh";
}

/// Number of CPUs in a Linux CPU list ("0-3,8"); 0 when unreadable.
int count_cpu_list(const std::string& text)
{
    int n = 0;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        int a = 0, b = 0;
        if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2 && b >= a)
            n += b - a + 1;
        else if (std::sscanf(part.c_str(), "%d", &a) == 1)
            ++n;
    }
    return n;
}

/// CPUs of this host the job may use: the cgroup's effective cpuset (v2, else v1), else the
/// online CPUs.
int host_cpu_count()
{
    auto first_line = [](const std::string& path) {
        std::ifstream f(path);
        std::string line;
        std::getline(f, line);
        return line;
    };
    std::ifstream cg("/proc/self/cgroup");
    std::string line;
    while (std::getline(cg, line)) {
        const auto a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const auto controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        int n = 0;
        if (controllers.empty()) // cgroup v2
            n = count_cpu_list(first_line("/sys/fs/cgroup" + path + "/cpuset.cpus.effective"));
        else if (("," + controllers + ",").find(",cpuset,") != std::string::npos) // v1
            n = count_cpu_list(first_line("/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus"));
        if (n > 0) return n;
    }
    const int online = count_cpu_list(first_line("/sys/devices/system/cpu/online"));
    return online > 0 ? online : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

/// The calling thread's affinity mask as sorted CPU ids.
std::vector<int> thread_cpus()
{
    for (int ncpu = 1024; ncpu <= (1 << 20); ncpu *= 2) {
        cpu_set_t* set = CPU_ALLOC(ncpu);
        const std::size_t size = CPU_ALLOC_SIZE(ncpu);
        if (sched_getaffinity(0, size, set) == 0) {
            std::vector<int> cpus;
            for (int c = 0; c < ncpu; ++c)
                if (CPU_ISSET_S(c, size, set)) cpus.push_back(c);
            CPU_FREE(set);
            return cpus;
        }
        CPU_FREE(set);
        if (errno != EINVAL) break;
    }
    return {};
}

} // namespace

std::string cpu_list(const std::vector<int>& cpus)
{
    std::string s;
    for (std::size_t i = 0; i < cpus.size();) {
        std::size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
            ++j;
        if (!s.empty()) s += ',';
        s += std::to_string(cpus[i]);
        if (j > i) {
            s += '-';
            s += std::to_string(cpus[j]);
        }
        i = j + 1;
    }
    return s;
}

std::vector<std::vector<int>> crowded_groups(const std::vector<rank_placement>& ranks, const std::vector<int>& members,
                                             int k)
{
    // Nodes: 0 source, 1 sink, 2.. ranks, then the CPUs in any mask.
    std::vector<int> cpu_ids;
    for (int r : members)
        cpu_ids.insert(cpu_ids.end(), ranks[r].cpus.begin(), ranks[r].cpus.end());
    sort_unique(cpu_ids);
    const int n = static_cast<int>(members.size());
    flow_network net(2 + n + static_cast<int>(cpu_ids.size()));
    long long demand = 0;
    for (int i = 0; i < n; ++i) {
        const auto& p = ranks[members[i]];
        net.add_edge(0, 2 + i, p.threads);
        demand += p.threads;
        for (int c : p.cpus)
            net.add_edge(2 + i, 2 + n + index_of(cpu_ids, c), INT_MAX / 2);
    }
    for (std::size_t c = 0; c < cpu_ids.size(); ++c)
        net.add_edge(2 + n + static_cast<int>(c), 1, k);
    if (net.max_flow(0, 1) >= demand) return {};
    // The min cut's source side: the crowded ranks and every CPU of their masks.
    const auto seen = net.reachable(0);
    return split_by_shared_cpus(ranks, members, cpu_ids, std::vector<char>(seen.begin() + 2, seen.begin() + 2 + n));
}

std::vector<int> shared_threads(const std::vector<rank_placement>& ranks)
{
    std::vector<int> threads(ranks.size());
    for (std::size_t r = 0; r < ranks.size(); ++r)
        threads[r] = ranks[r].threads;
    for (const auto& h : ranks_by_host(ranks)) {
        if (h.threads <= h.cpus) continue;
        for (int r : h.members)
            if (!ranks[r].threads_set) threads[r] = std::min(threads[r], h.per_rank());
    }
    return threads;
}

std::vector<std::string> placement_warnings(const std::vector<rank_placement>& ranks)
{
    std::vector<std::string> out;
    std::vector<char> crowded_alone;
    warn_threads_over_cpus(ranks, out, crowded_alone); // (a)
    for (const auto& h : ranks_by_host(ranks)) {
        // (b) threads of several ranks crowded onto shared CPUs.
        const int k = static_cast<int>((h.threads + h.cpus - 1) / h.cpus);
        bool warned = false;
        for (const auto& g : crowded_groups(ranks, h.members, k)) {
            if (g.size() == 1 && crowded_alone[g[0]] != 0) continue; // rule (a) said it
            out.push_back(crowded_warning(ranks, h, g));
            warned = true;
        }
        // (c) the default binding left CPUs idle.
        if (!warned && !h.any_set && !h.any_bind && static_cast<int>(h.used.size()) < h.cpus && h.threads < h.cpus)
            out.push_back(idle_cpus_note(h));
        // (d) more threads than CPUs although the ranks could run fewer each.
        const bool alone =
            std::any_of(h.members.begin(), h.members.end(), [&](int r) { return crowded_alone[r] != 0; });
        if (!warned && !alone && h.threads > h.cpus &&
            std::any_of(h.members.begin(), h.members.end(), [&](int r) { return ranks[r].threads > 1; }))
            out.push_back(oversubscribed_warning(h));
    }
    return out;
}

// Record layout: threads, host_cpus, flags, host bytes, mask words, host words..., mask words...
std::vector<std::uint64_t> pack_placement(const rank_placement& p)
{
    const std::size_t name_words = (p.host.size() + 7) / 8;
    const std::size_t mask_words = p.cpus.empty() ? 0 : static_cast<std::size_t>(p.cpus.back()) / 64 + 1;
    std::vector<std::uint64_t> rec{static_cast<std::uint64_t>(p.threads), static_cast<std::uint64_t>(p.host_cpus),
                                   (p.threads_set ? 1U : 0U) | (p.omp_bind ? 2U : 0U), p.host.size(), mask_words};
    rec.resize(5 + name_words + mask_words, 0);
    for (std::size_t i = 0; i < p.host.size(); ++i)
        rec[5 + i / 8] |= static_cast<std::uint64_t>(static_cast<unsigned char>(p.host[i])) << (8 * (i % 8));
    for (int c : p.cpus)
        rec[5 + name_words + static_cast<std::size_t>(c) / 64] |= std::uint64_t{1} << (c % 64);
    return rec;
}

std::vector<rank_placement> unpack_placements(std::span<const std::uint64_t> all)
{
    std::vector<rank_placement> out;
    for (std::size_t at = 0; at + 5 <= all.size();) {
        rank_placement p;
        p.threads = static_cast<int>(all[at]);
        p.host_cpus = static_cast<int>(all[at + 1]);
        p.threads_set = (all[at + 2] & 1U) != 0;
        p.omp_bind = (all[at + 2] & 2U) != 0;
        const auto name_bytes = static_cast<std::size_t>(all[at + 3]),
                   mask_words = static_cast<std::size_t>(all[at + 4]);
        const std::size_t name_words = (name_bytes + 7) / 8;
        for (std::size_t i = 0; i < name_bytes; ++i)
            p.host += static_cast<char>((all[at + 5 + i / 8] >> (8 * (i % 8))) & 0xFFU);
        for (std::size_t w = 0; w < mask_words; ++w)
            for (int b = 0; b < 64; ++b)
                if (((all[at + 5 + name_words + w] >> b) & 1U) != 0) p.cpus.push_back(static_cast<int>(w * 64) + b);
        out.push_back(std::move(p));
        at += 5 + name_words + mask_words;
    }
    return out;
}

rank_placement local_placement()
{
    rank_placement p;
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    p.host = name;
    p.threads = omp_get_max_threads();
    p.host_cpus = host_cpu_count();
    p.threads_set = std::getenv("OMP_NUM_THREADS") != nullptr;
    p.omp_bind = omp_get_proc_bind() != omp_proc_bind_false;
    std::vector<int> all;
#pragma omp parallel
    {
        const auto mine = thread_cpus();
#pragma omp critical(retexo_placement)
        all.insert(all.end(), mine.begin(), mine.end());
    }
    sort_unique(all);
    p.cpus = std::move(all);
    return p;
}

std::vector<rank_placement> gather_placements(const mpi::communicator& comm, const rank_placement& mine)
{
    const auto words = pack_placement(mine);
    return unpack_placements(comm.allgatherv(std::span<const std::uint64_t>(words), purpose::control));
}

void place_threads(const mpi::communicator& comm, const std::string& tool)
{
    auto all = gather_placements(comm, local_placement());
    const auto threads = shared_threads(all);
    omp_set_num_threads(threads[static_cast<std::size_t>(comm.rank())]);
    if (comm.rank() != 0) return;
    for (const auto& h : ranks_by_host(all))
        for (int r : h.members)
            if (threads[r] != all[r].threads) {
                std::fprintf(stderr,
                             "%s: note: OMP_NUM_THREADS is unset: the %zu rank(s) on host %s share its %d CPUs, so "
                             "each runs %d OpenMP thread(s), not %d (set OMP_NUM_THREADS to choose)\n",
                             tool.c_str(), h.members.size(), h.name.c_str(), h.cpus, threads[r], all[r].threads);
                break;
            }
    for (std::size_t r = 0; r < all.size(); ++r)
        all[r].threads = threads[r];
    for (const auto& line : placement_warnings(all))
        std::fprintf(stderr, "%s: %s\n", tool.c_str(), line.c_str());
    std::fflush(stderr);
}

} // namespace retexo
