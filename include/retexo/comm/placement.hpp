#pragma once
/// @file placement.hpp
/// The placement check: where each rank's OpenMP threads may run, and the warnings when ranks
/// and threads are placed so that some of them must share CPUs although the host has enough,
/// with the fix.  retexo_mpi runs it at start (place_threads): ranks left to OpenMP's default
/// thread count on an oversubscribed host get their share of its CPUs, and the warnings go to
/// stderr (no output file changes).
///
/// Each rank reports its host name, T = omp_get_max_threads(), M = the CPUs its threads may run
/// on (union of every OpenMP thread's affinity mask, read inside a parallel region, so that
/// OMP_PROC_BIND/OMP_PLACES pinning is seen as it really is), and H = the number of CPUs of its
/// host the job may use (the cgroup's cpuset, else the online CPUs).  Rules:
///  (a) T > |M|: the rank's threads time-share its CPUs.  Typical cause: Open MPI binds each rank
///      to one core by default (np <= cores) while OMP_NUM_THREADS asks for more threads.
///  (b) On one host, with sum(T) threads over its ranks, the fairest placement needs at most
///      k = ceil(sum(T) / H) threads per CPU (k = 1 unless the host is oversubscribed).  Warn when
///      the masks make that impossible: no assignment of every thread to a CPU of its rank's mask
///      with at most k threads per CPU exists (a max flow ranks -> CPUs; by Hall's theorem it
///      fails exactly when some group of ranks has more than k x |their CPUs| threads), so
///      threads of several ranks are pinned to the same cores while other cores of the host stay
///      unused.  The group is the min cut's source side (split into groups that share CPUs);
///      a group of one rank is rule (a).  An oversubscribed run with --bind-to none (every mask =
///      every CPU, np > cores) is legitimate and passes: the flow fits with k > 1.
///  (c) A note when OMP_NUM_THREADS is unset on every rank of a host and its ranks' masks cover
///      fewer CPUs than the host has while sum(T) < H: the launcher's default binding (Open MPI:
///      one core per rank) made OpenMP start one thread per CPU of that small mask, and the other
///      CPUs stay idle (plain `mpirun -np 1 retexo_mpi` on a multi-core machine).
///  (d) On one host, more threads than CPUs (sum(T) > H) while some rank runs more than one:
///      the ranks' threads time-share the CPUs (spinning OpenMP and MPI waits make that many
///      times slower).  place_threads first gives every rank whose OMP_NUM_THREADS is unset its
///      share, min(T, max(1, H / ranks on the host)) (shared_threads), and notes it; a warning is
///      left only where OMP_NUM_THREADS asks for the oversubscription (plain `mpirun -np 4` on
///      2 cores, each rank's mask every CPU and OMP_NUM_THREADS=2).
/// mpi_scripts/retexo_run.sh's placements (np <= cores: --map-by slot:PE=T, disjoint masks of T
/// CPUs; np > cores: --bind-to none, T = 1) pass every rule.
///
/// The rules (placement_warnings, crowded_groups, shared_threads) are pure functions of the ranks' records, so
/// they are tested on made-up placements; local_placement reads this process's placement and
/// gather_placements / place_threads are the collective steps.

#include <retexo/comm/communicator.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace retexo {

/// Where one rank's threads may run, as it reports it.
struct rank_placement {
    std::string host;
    int threads = 1;          ///< omp_get_max_threads()
    int host_cpus = 1;        ///< CPUs of the host the job may use
    bool threads_set = false; ///< OMP_NUM_THREADS set
    bool omp_bind = false;    ///< OpenMP binds its threads (OMP_PROC_BIND / OMP_PLACES)
    std::vector<int> cpus;    ///< sorted CPU ids the rank's threads may run on

    bool operator==(const rank_placement&) const = default;
};

/// The warnings for these placements (rank r's record at index r), one line each without a
/// trailing newline, each starting "warning: " (rules (a), (b)) or "note: " (rule (c)):
/// rule (a) for the first 4 ranks it applies to (then one "... and N more rank(s) alike"), then
/// rules (b) and (c) host by host, hosts in the order of their first rank.  Empty when the
/// placement is fine.
std::vector<std::string> placement_warnings(const std::vector<rank_placement>& ranks);

/// Rule (b): the groups of ranks among `members` (indices into `ranks`, all of one host) whose
/// threads cannot each get a CPU of their rank's mask with at most k threads per CPU: the min
/// cut's source side of the max flow ranks -> CPUs, split into groups that share CPUs.  Each
/// group lists its members in the order of `members`; groups come in the order of their first
/// member.  Empty when every thread fits.
std::vector<std::vector<int>> crowded_groups(const std::vector<rank_placement>& ranks, const std::vector<int>& members,
                                             int k);

/// Rule (d)'s remedy: each rank's OpenMP thread count after the ranks whose OMP_NUM_THREADS is
/// unset take their share of an oversubscribed host's CPUs, min(threads, max(1, CPUs / ranks on
/// the host)); every other rank keeps its count.
std::vector<int> shared_threads(const std::vector<rank_placement>& ranks);

/// "0-3,8" from sorted CPU ids (the Linux CPU list format).
std::string cpu_list(const std::vector<int>& cpus);

/// One rank's record as 64-bit words, the form gather_placements sends.
std::vector<std::uint64_t> pack_placement(const rank_placement& p);

/// The records of pack_placement, concatenated (rank order kept).
std::vector<rank_placement> unpack_placements(std::span<const std::uint64_t> words);

/// This process's placement: host name, OpenMP threads, the union of every OpenMP thread's
/// affinity mask (read inside a parallel region), the host's CPUs the job may use (the
/// cgroup's effective cpuset, v2 else v1, else the online CPUs).
rank_placement local_placement();

/// Every rank's placement, rank r's at index r (collective: one allgatherv, counted as control
/// traffic).
std::vector<rank_placement> gather_placements(const mpi::communicator& comm, const rank_placement& mine);

/// Collective: gather every rank's local_placement(); where a host has more threads than CPUs,
/// set each rank whose OMP_NUM_THREADS is unset to its share (shared_threads, with a note);
/// then print the warnings on rank 0 to stderr, each line prefixed "<tool>: ".  Meant before
/// any trainer starts, so that no run's bytes change (results do not depend on the thread
/// count).
void place_threads(const mpi::communicator& comm, const std::string& tool);

} // namespace retexo
