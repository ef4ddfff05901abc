#pragma once
// retexo_mpi's placement check: at start every rank reports where its OpenMP threads may run,
// and rank 0 warns (stderr only; no output file changes) when ranks and threads are placed so
// that some of them must share CPUs although the host has enough, with the fix.
//
// Each rank reports its host name, T = omp_get_max_threads(), M = the CPUs its threads may run
// on (union of every OpenMP thread's affinity mask, read inside a parallel region, so that
// OMP_PROC_BIND/OMP_PLACES pinning is seen as it really is), and H = the number of CPUs of its
// host the job may use (the cgroup's cpuset, else the online CPUs).  Rules:
//  (a) T > |M|: the rank's threads time-share its CPUs.  Typical cause: Open MPI binds each rank
//      to one core by default (np <= cores) while OMP_NUM_THREADS asks for more threads.
//  (b) On one host, with sum(T) threads over its ranks, the fairest placement needs at most
//      k = ceil(sum(T) / H) threads per CPU (k = 1 unless the host is oversubscribed).  Warn when
//      the masks make that impossible: no assignment of every thread to a CPU of its rank's mask
//      with at most k threads per CPU exists (a max flow ranks -> CPUs; by Hall's theorem it
//      fails exactly when some group of ranks has more than k x |their CPUs| threads), so
//      threads of several ranks are pinned to the same cores while other cores of the host stay
//      unused.  The group is the min cut's source side (split into groups that share CPUs);
//      a group of one rank is rule (a).  An oversubscribed run with --bind-to none (every mask =
//      every CPU, np > cores) is legitimate and passes: the flow fits with k > 1.
//  (c) A note when OMP_NUM_THREADS is unset on every rank of a host and its ranks' masks cover
//      fewer CPUs than the host has while sum(T) < H: the launcher's default binding (Open MPI:
//      one core per rank) made OpenMP start one thread per CPU of that small mask, and the other
//      CPUs stay idle (plain `mpirun -np 1 retexo_mpi` on a multi-core machine).
// mpi_scripts/retexo_run.sh's placements (np <= cores: --map-by slot:PE=T, disjoint masks of T
// CPUs; np > cores: --bind-to none, T = 1) pass every rule.

#include <retexo/comm/communicator.hpp>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

namespace retexo::placement {

/// What one rank reports.
struct rank_placement {
    std::string host;
    int threads = 1;          ///< omp_get_max_threads()
    int host_cpus = 1;        ///< CPUs of the host the job may use
    bool threads_set = false; ///< OMP_NUM_THREADS set
    bool omp_bind = false;    ///< OpenMP binds its threads (OMP_PROC_BIND / OMP_PLACES)
    std::vector<int> cpus;    ///< sorted CPU ids the rank's threads may run on
};

/// "0-3,8" from sorted CPU ids.
inline std::string cpu_list(const std::vector<int>& cpus)
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

/// Number of CPUs in a Linux CPU list ("0-3,8"); 0 when unreadable.
inline int count_cpu_list(const std::string& text)
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
inline int host_cpu_count()
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
inline std::vector<int> thread_cpus()
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

/// This rank's placement.
inline rank_placement local_placement()
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
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    p.cpus = std::move(all);
    return p;
}

/// Record layout: threads, host_cpus, flags, host bytes, mask words, host words..., mask words...
inline std::vector<std::uint64_t> pack(const rank_placement& p)
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

inline std::vector<rank_placement> unpack(const std::vector<std::uint64_t>& all)
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

/// "0,1,2,5" (at most 16 ranks named).
inline std::string rank_list(const std::vector<int>& ranks)
{
    std::string s;
    for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) {
        if (i != 0) s += ',';
        s += std::to_string(ranks[i]);
    }
    if (ranks.size() > 16) s += ",... (" + std::to_string(ranks.size()) + " ranks)";
    return s;
}

/// The groups of ranks of one host (indices into `ranks`) whose threads cannot each get a CPU
/// share of at most k threads per CPU within their masks (rule (b); see the file comment).
inline std::vector<std::vector<int>> crowded_groups(const std::vector<rank_placement>& ranks,
                                                    const std::vector<int>& members, int k)
{
    // Nodes: 0 source, 1 sink, 2.. ranks, then the CPUs in any mask.
    std::vector<int> cpu_ids;
    for (int r : members)
        cpu_ids.insert(cpu_ids.end(), ranks[r].cpus.begin(), ranks[r].cpus.end());
    std::sort(cpu_ids.begin(), cpu_ids.end());
    cpu_ids.erase(std::unique(cpu_ids.begin(), cpu_ids.end()), cpu_ids.end());
    const int n = static_cast<int>(members.size()), nodes = 2 + n + static_cast<int>(cpu_ids.size());
    struct edge {
        int to, cap;
    };
    std::vector<edge> edges;
    std::vector<std::vector<int>> adj(static_cast<std::size_t>(nodes));
    auto add = [&](int u, int v, int cap) {
        adj[u].push_back(static_cast<int>(edges.size()));
        edges.push_back({v, cap});
        adj[v].push_back(static_cast<int>(edges.size()));
        edges.push_back({u, 0});
    };
    long long demand = 0;
    for (int i = 0; i < n; ++i) {
        const auto& p = ranks[members[i]];
        add(0, 2 + i, p.threads);
        demand += p.threads;
        for (int c : p.cpus)
            add(2 + i, 2 + n + static_cast<int>(std::lower_bound(cpu_ids.begin(), cpu_ids.end(), c) - cpu_ids.begin()),
                INT_MAX / 2);
    }
    for (std::size_t c = 0; c < cpu_ids.size(); ++c)
        add(2 + n + static_cast<int>(c), 1, k);
    // Edmonds-Karp: at most sum(T) augmenting paths on a small graph.
    long long flow = 0;
    std::vector<int> parent_edge(static_cast<std::size_t>(nodes));
    auto reach = [&] {
        std::fill(parent_edge.begin(), parent_edge.end(), -1);
        std::vector<char> seen(static_cast<std::size_t>(nodes), 0);
        std::queue<int> q;
        q.push(0);
        seen[0] = 1;
        while (!q.empty()) {
            const int u = q.front();
            q.pop();
            for (int e : adj[u])
                if (edges[e].cap > 0 && seen[edges[e].to] == 0) {
                    seen[edges[e].to] = 1;
                    parent_edge[edges[e].to] = e;
                    q.push(edges[e].to);
                }
        }
        return seen;
    };
    for (;;) {
        reach();
        if (parent_edge[1] < 0) break;
        int push = INT_MAX;
        for (int v = 1; v != 0; v = edges[parent_edge[v] ^ 1].to)
            push = std::min(push, edges[parent_edge[v]].cap);
        for (int v = 1; v != 0; v = edges[parent_edge[v] ^ 1].to) {
            edges[parent_edge[v]].cap -= push;
            edges[parent_edge[v] ^ 1].cap += push;
        }
        flow += push;
    }
    if (flow >= demand) return {};
    // The min cut's source side: the crowded ranks and every CPU of their masks.  Split it into
    // groups that share CPUs (union-find over ranks).
    const auto seen = reach();
    std::vector<int> group(static_cast<std::size_t>(n));
    std::iota(group.begin(), group.end(), 0);
    auto find = [&](int x) {
        while (group[x] != x)
            x = group[x] = group[group[x]];
        return x;
    };
    std::vector<int> owner(cpu_ids.size(), -1);
    for (int i = 0; i < n; ++i) {
        if (seen[2 + i] == 0) continue;
        for (int c : ranks[members[i]].cpus) {
            const auto ci =
                static_cast<std::size_t>(std::lower_bound(cpu_ids.begin(), cpu_ids.end(), c) - cpu_ids.begin());
            if (owner[ci] < 0)
                owner[ci] = i;
            else
                group[find(i)] = find(owner[ci]);
        }
    }
    std::vector<std::vector<int>> out;
    std::vector<int> slot(static_cast<std::size_t>(n), -1);
    for (int i = 0; i < n; ++i) {
        if (seen[2 + i] == 0) continue;
        const int g = find(i);
        if (slot[g] < 0) {
            slot[g] = static_cast<int>(out.size());
            out.emplace_back();
        }
        out[slot[g]].push_back(members[i]);
    }
    return out;
}

/// The warnings (one line each, no trailing newline) for these ranks' placements.
inline std::vector<std::string> warnings(const std::vector<rank_placement>& ranks)
{
    std::vector<std::string> out;
    const int nranks = static_cast<int>(ranks.size());
    // (a) more threads than CPUs in a rank's mask.
    int shown = 0, more = 0;
    std::vector<char> crowded_alone(ranks.size(), 0);
    for (int r = 0; r < nranks; ++r) {
        const auto& p = ranks[r];
        const int c = static_cast<int>(p.cpus.size());
        if (c == 0 || p.threads <= c) continue;
        crowded_alone[r] = 1;
        if (shown++ >= 4) {
            ++more;
            continue;
        }
        const int t = p.threads;
        out.push_back("retexo_mpi: warning: rank " + std::to_string(r) + " runs " + std::to_string(t) +
                      " OpenMP threads on " + std::to_string(c) + " CPU(s) (affinity mask " + cpu_list(p.cpus) +
                      (p.omp_bind ? ", OMP_PROC_BIND/OMP_PLACES in effect" : "") +
                      "): set OMP_NUM_THREADS=" + std::to_string(c) +
                      ", or start with mpi_scripts/retexo_run.sh / mpirun --bind-to none / --map-by slot:PE=" +
                      std::to_string(t));
    }
    if (more > 0) out.push_back("retexo_mpi: warning: ... and " + std::to_string(more) + " more rank(s) alike");
    // Ranks by host, in rank order of each host's first rank.
    std::vector<std::string> hosts;
    std::vector<std::vector<int>> by_host;
    for (int r = 0; r < nranks; ++r) {
        const auto it = std::find(hosts.begin(), hosts.end(), ranks[r].host);
        if (it == hosts.end()) {
            hosts.push_back(ranks[r].host);
            by_host.push_back({r});
        } else {
            by_host[static_cast<std::size_t>(it - hosts.begin())].push_back(r);
        }
    }
    for (std::size_t h = 0; h < hosts.size(); ++h) {
        const auto& members = by_host[h];
        int host_cpus = 0;
        long long total = 0;
        bool any_set = false, any_bind = false;
        std::vector<int> used;
        for (int r : members) {
            host_cpus = std::max(host_cpus, ranks[r].host_cpus);
            total += ranks[r].threads;
            any_set = any_set || ranks[r].threads_set;
            any_bind = any_bind || ranks[r].omp_bind;
            used.insert(used.end(), ranks[r].cpus.begin(), ranks[r].cpus.end());
        }
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        host_cpus = std::max(host_cpus, static_cast<int>(used.size()));
        // (b) threads of several ranks crowded onto shared CPUs.
        const int k = static_cast<int>((total + host_cpus - 1) / host_cpus);
        bool warned = false;
        for (const auto& g : crowded_groups(ranks, members, k)) {
            if (g.size() == 1 && crowded_alone[g[0]] != 0) continue; // rule (a) said it
            long long threads = 0;
            bool bind = false;
            std::vector<int> cpus;
            for (int r : g) {
                threads += ranks[r].threads;
                bind = bind || ranks[r].omp_bind;
                cpus.insert(cpus.end(), ranks[r].cpus.begin(), ranks[r].cpus.end());
            }
            std::sort(cpus.begin(), cpus.end());
            cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
            const int per_rank = std::max(1, host_cpus / static_cast<int>(members.size()));
            out.push_back("retexo_mpi: warning: ranks " + rank_list(g) + " on host " + hosts[h] + " run " +
                          std::to_string(threads) + " OpenMP threads in all on the same " +
                          std::to_string(cpus.size()) + " CPU(s) (" + cpu_list(cpus) + ") while the host has " +
                          std::to_string(host_cpus) + " CPUs for its " + std::to_string(total) + " threads" +
                          (bind ? "; OMP_PROC_BIND/OMP_PLACES pin each rank's threads from the first CPU of its "
                                  "mask, so unset them where the launcher does not bind each rank to its own cores"
                                : "") +
                          (static_cast<int>(members.size()) > host_cpus
                               ? ": with more ranks than CPUs let them share all CPUs (mpi_scripts/retexo_run.sh, "
                                 "mpirun --bind-to none)"
                               : ": give each rank its own cores (mpi_scripts/retexo_run.sh, mpirun --map-by slot:PE=" +
                                     std::to_string(per_rank) +
                                     " --bind-to core, srun --cpu-bind=cores where Slurm binds tasks)"));
            warned = true;
        }
        // (c) the default binding left CPUs idle.
        if (!warned && !any_set && !any_bind && static_cast<int>(used.size()) < host_cpus && total < host_cpus) {
            const int per_rank = std::max(1, host_cpus / static_cast<int>(members.size()));
            out.push_back("retexo_mpi: note: the " + std::to_string(members.size()) + " rank(s) on host " + hosts[h] +
                          " run " + std::to_string(total) + " OpenMP thread(s) on " + std::to_string(used.size()) +
                          " of its " + std::to_string(host_cpus) +
                          " CPUs (the launcher bound each rank to a few CPUs and OMP_NUM_THREADS is unset): start "
                          "with mpi_scripts/retexo_run.sh, or set OMP_NUM_THREADS=" +
                          std::to_string(per_rank) + " and mpirun --map-by slot:PE=" + std::to_string(per_rank) +
                          " --bind-to core");
        }
    }
    return out;
}

/// Collective: gather every rank's placement (one allgather, counted as control traffic) and
/// print the warnings on rank 0 (stderr).  Before any trainer starts, so no run's bytes change.
inline void check(const mpi::communicator& comm)
{
    const auto mine = pack(local_placement());
    const auto all = unpack(comm.allgatherv(std::span<const std::uint64_t>(mine), purpose::control));
    if (comm.rank() != 0) return;
    for (const auto& line : warnings(all))
        std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
}

} // namespace retexo::placement
