// The placement check's rules on made-up placements (no MPI): which placements warn, the exact
// lines, rule (b)'s max flow where a fair assignment of threads to CPUs exists and where it does
// not, and the record's word form.
#include <retexo/comm/placement.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace retexo;

namespace {

/// A rank on `host` (with `host_cpus` CPUs) running `threads` OpenMP threads on `cpus`;
/// OMP_NUM_THREADS set and no OpenMP binding unless said.
rank_placement on(const std::string& host, int host_cpus, int threads, std::vector<int> cpus, bool threads_set = true,
                  bool omp_bind = false)
{
    return {.host = host,
            .threads = threads,
            .host_cpus = host_cpus,
            .threads_set = threads_set,
            .omp_bind = omp_bind,
            .cpus = std::move(cpus)};
}

using groups = std::vector<std::vector<int>>;

} // namespace

TEST_CASE("placement: cpu_list writes runs of CPUs as ranges", "[placement]")
{
    CHECK(cpu_list({}).empty());
    CHECK(cpu_list({3}) == "3");
    CHECK(cpu_list({5, 6}) == "5-6");
    CHECK(cpu_list({0, 2, 4}) == "0,2,4");
    CHECK(cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
}

TEST_CASE("placement: no warning when each rank has its own CPUs", "[placement]")
{
    // retexo_run.sh with np <= cores: --map-by slot:PE=2, disjoint masks of 2 CPUs.
    CHECK(
        placement_warnings({on("n", 8, 2, {0, 1}), on("n", 8, 2, {2, 3}), on("n", 8, 2, {4, 5}), on("n", 8, 2, {6, 7})})
            .empty());
    // One rank whose threads may use the whole host, OMP_NUM_THREADS unset (no idle CPUs: no note).
    CHECK(placement_warnings({on("n", 4, 4, {0, 1, 2, 3}, false)}).empty());
    // retexo_run.sh with np > cores: --bind-to none, one thread each, every mask = every CPU:
    // 12 threads on 8 CPUs need k = 2 threads per CPU, and the flow fits.
    std::vector<rank_placement> unbound(12, on("n", 8, 1, {0, 1, 2, 3, 4, 5, 6, 7}));
    CHECK(placement_warnings(unbound).empty());
    // Ranks on different hosts may use the same CPU ids.
    CHECK(placement_warnings({on("a", 2, 1, {0}), on("b", 2, 1, {0}), on("a", 2, 1, {1}), on("b", 2, 1, {1})}).empty());
    CHECK(placement_warnings({}).empty());
}

TEST_CASE("placement: more threads than allowed CPUs warns (rule a)", "[placement]")
{
    const auto w = placement_warnings({on("n", 4, 2, {0, 1}), on("n", 4, 4, {3})});
    REQUIRE(w.size() == 1); // rule (b)'s group of rank 1 alone is not repeated
    CHECK(w[0] == "warning: rank 1 runs 4 OpenMP threads on 1 CPU(s) (affinity mask 3): set OMP_NUM_THREADS=1, or "
                  "start with mpi_scripts/retexo_run.sh / mpirun --bind-to none / --map-by slot:PE=4");

    SECTION("with OpenMP binding in effect")
    {
        const auto b = placement_warnings({on("n", 8, 3, {2, 3}, true, true)});
        REQUIRE(b.size() == 1);
        CHECK(b[0] == "warning: rank 0 runs 3 OpenMP threads on 2 CPU(s) (affinity mask 2-3, OMP_PROC_BIND/OMP_PLACES "
                      "in effect): set OMP_NUM_THREADS=2, or start with mpi_scripts/retexo_run.sh / mpirun --bind-to "
                      "none / --map-by slot:PE=3");
    }
    SECTION("four ranks named, the others counted")
    {
        std::vector<rank_placement> ranks;
        ranks.reserve(6);
        for (int r = 0; r < 6; ++r)
            ranks.push_back(on("n", 8, 2, {r}));
        const auto m = placement_warnings(ranks);
        REQUIRE(m.size() == 5);
        for (int r = 0; r < 4; ++r)
            CHECK(m[r].rfind("warning: rank " + std::to_string(r) +
                                 " runs 2 OpenMP threads on 1 CPU(s) (affinity mask " + std::to_string(r) + "):",
                             0) == 0);
        CHECK(m[4] == "warning: ... and 2 more rank(s) alike");
    }
}

TEST_CASE("placement: ranks pinned to the same CPU while others idle warn (rule b)", "[placement]")
{
    // Issue #18: OMP_PROC_BIND with unbound ranks pins every rank's thread to the first core.
    const auto w = placement_warnings({on("node1", 4, 1, {0}, true, true), on("node1", 4, 1, {0}, true, true)});
    REQUIRE(w.size() == 1);
    CHECK(w[0] == "warning: ranks 0,1 on host node1 run 2 OpenMP threads in all on the same 1 CPU(s) (0) while the "
                  "host has 4 CPUs for its 2 threads; OMP_PROC_BIND/OMP_PLACES pin each rank's threads from the first "
                  "CPU of its mask, so unset them where the launcher does not bind each rank to its own cores: give "
                  "each rank its own cores (mpi_scripts/retexo_run.sh, mpirun --map-by slot:PE=2 --bind-to core, srun "
                  "--cpu-bind=cores where Slurm binds tasks)");

    SECTION("more ranks than CPUs, all on one of them")
    {
        // 3 threads on a 2-CPU host need k = 2 per CPU; CPU 0 holds 3.
        const auto m = placement_warnings({on("h", 2, 1, {0}), on("h", 2, 1, {0}), on("h", 2, 1, {0})});
        REQUIRE(m.size() == 1);
        CHECK(m[0] == "warning: ranks 0,1,2 on host h run 3 OpenMP threads in all on the same 1 CPU(s) (0) while the "
                      "host has 2 CPUs for its 3 threads: with more ranks than CPUs let them share all CPUs "
                      "(mpi_scripts/retexo_run.sh, mpirun --bind-to none)");
    }
    SECTION("at most 16 ranks named")
    {
        std::vector<rank_placement> ranks(20, on("h", 32, 1, {0}));
        const auto m = placement_warnings(ranks);
        REQUIRE(m.size() == 1);
        CHECK(m[0].rfind("warning: ranks 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,... (20 ranks) on host h run 20 OpenMP "
                         "threads in all on the same 1 CPU(s) (0) while the host has 32 CPUs for its 20 threads: ",
                         0) == 0);
    }
}

TEST_CASE("placement: several hosts are judged apart, in the order of their first rank", "[placement]")
{
    const auto w = placement_warnings({
        on("b", 4, 1, {1}),        // rank 0: crowded with rank 3
        on("a", 4, 1, {2}),        // rank 1: crowded with rank 2
        on("a", 4, 1, {2}),        // rank 2
        on("b", 4, 1, {1}),        // rank 3
        on("c", 8, 1, {0}, false), // rank 4: the default binding left 7 CPUs idle (rule c)
        on("d", 4, 2, {0, 1}),     // ranks 5, 6: fine
        on("d", 4, 2, {2, 3}),
    });
    REQUIRE(w.size() == 3);
    CHECK(w[0].rfind("warning: ranks 0,3 on host b run 2 OpenMP threads in all on the same 1 CPU(s) (1) while the host "
                     "has 4 CPUs for its 2 threads: give each rank its own cores (mpi_scripts/retexo_run.sh, mpirun "
                     "--map-by slot:PE=2 ",
                     0) == 0);
    CHECK(w[1].rfind("warning: ranks 1,2 on host a run 2 OpenMP threads in all on the same 1 CPU(s) (2) ", 0) == 0);
    CHECK(w[2] == "note: the 1 rank(s) on host c run 1 OpenMP thread(s) on 1 of its 8 CPUs (the launcher bound each "
                  "rank to a few CPUs and OMP_NUM_THREADS is unset): start with mpi_scripts/retexo_run.sh, or set "
                  "OMP_NUM_THREADS=8 and mpirun --map-by slot:PE=8 --bind-to core");
}

TEST_CASE("placement: rule (c) notes idle CPUs only when the launcher chose the placement", "[placement]")
{
    const auto note = placement_warnings({on("n", 8, 1, {0}, false), on("n", 8, 1, {1}, false)});
    REQUIRE(note.size() == 1);
    CHECK(note[0] == "note: the 2 rank(s) on host n run 2 OpenMP thread(s) on 2 of its 8 CPUs (the launcher bound each "
                     "rank to a few CPUs and OMP_NUM_THREADS is unset): start with mpi_scripts/retexo_run.sh, or set "
                     "OMP_NUM_THREADS=4 and mpirun --map-by slot:PE=4 --bind-to core");
    // OMP_NUM_THREADS set on one rank, or OpenMP binding: the user chose it.
    CHECK(placement_warnings({on("n", 8, 1, {0}, false), on("n", 8, 1, {1}, true)}).empty());
    CHECK(placement_warnings({on("n", 8, 1, {0}, false, true), on("n", 8, 1, {1}, false)}).empty());
    // As many threads as CPUs: nothing idles.
    CHECK(placement_warnings({on("n", 2, 1, {0}, false), on("n", 2, 1, {1}, false)}).empty());
}

TEST_CASE("placement: ranks left to OpenMP's default share an oversubscribed host (rule d)", "[placement]")
{
    // Plain mpirun -np 4 on 2 cores: every mask is every CPU and OpenMP starts 2 threads each.
    const std::vector<rank_placement> plain(4, on("n", 2, 2, {0, 1}, false));
    CHECK(shared_threads(plain) == std::vector<int>{1, 1, 1, 1});
    // 2 ranks on 8 CPUs, 8 threads each: 4 each.
    CHECK(shared_threads({on("n", 8, 8, {0, 1, 2, 3, 4, 5, 6, 7}, false),
                          on("n", 8, 8, {0, 1, 2, 3, 4, 5, 6, 7}, false)}) == std::vector<int>{4, 4});
    // No more threads than CPUs, OMP_NUM_THREADS set, or another host's ranks: unchanged.
    CHECK(shared_threads({on("n", 4, 2, {0, 1}, false), on("n", 4, 2, {2, 3}, false)}) == std::vector<int>{2, 2});
    CHECK(shared_threads(std::vector<rank_placement>(4, on("n", 2, 2, {0, 1}))) == std::vector<int>{2, 2, 2, 2});
    CHECK(shared_threads({on("a", 2, 2, {0, 1}, false), on("b", 2, 2, {0, 1}, false)}) == std::vector<int>{2, 2});
    // One thread each on more ranks than CPUs stays one (never zero).
    CHECK(shared_threads(std::vector<rank_placement>(3, on("n", 2, 1, {0, 1}, false))) == std::vector<int>{1, 1, 1});

    // OMP_NUM_THREADS asks for the oversubscription: a warning with the share.
    const auto w = placement_warnings(std::vector<rank_placement>(4, on("n", 2, 2, {0, 1})));
    REQUIRE(w.size() == 1);
    CHECK(w[0] == "warning: the 4 rank(s) on host n run 8 OpenMP threads on its 2 CPUs, more than one per CPU, so they "
                  "time-share them (OMP_NUM_THREADS asks for it): set OMP_NUM_THREADS=1, or start with "
                  "mpi_scripts/retexo_run.sh");
    // After the share, and with one thread per rank on more ranks than CPUs: no warning.
    auto shared = plain;
    for (auto& p : shared)
        p.threads = 1;
    CHECK(placement_warnings(shared).empty());
}

TEST_CASE("placement: crowded_groups finds a fair assignment where one exists (max flow)", "[placement]")
{
    // Rank 0 may use CPU 0 or 1, rank 1 only CPU 0: giving rank 0 CPU 0 first would leave rank 1
    // without one; the flow reroutes rank 0 to CPU 1.
    CHECK(crowded_groups({on("n", 2, 1, {0, 1}), on("n", 2, 1, {0})}, {0, 1}, 1).empty());
    // Overlapping masks, 4 threads on 4 CPUs: rank 0 takes CPUs 2 and 3, ranks 1 and 2 CPUs 0 and 1.
    const std::vector<rank_placement> fits{on("n", 4, 2, {0, 1, 2, 3}), on("n", 4, 1, {0}), on("n", 4, 1, {1})};
    CHECK(crowded_groups(fits, {0, 1, 2}, 1).empty());
    CHECK(placement_warnings(fits).empty());
    // k threads per CPU: 6 single-thread ranks on 2 CPUs fit with k = 3, not with k = 2.
    const std::vector<rank_placement> shared(6, on("n", 2, 1, {0, 1}));
    CHECK(crowded_groups(shared, {0, 1, 2, 3, 4, 5}, 3).empty());
    CHECK(crowded_groups(shared, {0, 1, 2, 3, 4, 5}, 2) == groups{{0, 1, 2, 3, 4, 5}});
}

TEST_CASE("placement: crowded_groups names the ranks that cannot fit (min cut)", "[placement]")
{
    // Ranks 0-2 have 3 threads on CPUs {0, 1} (Hall's condition fails for them); rank 3 is fine.
    const std::vector<rank_placement> ranks{on("n", 4, 1, {0, 1}), on("n", 4, 1, {0}), on("n", 4, 1, {1}),
                                            on("n", 4, 1, {2, 3})};
    CHECK(crowded_groups(ranks, {0, 1, 2, 3}, 1) == groups{{0, 1, 2}});
    const auto w = placement_warnings(ranks);
    REQUIRE(w.size() == 1);
    CHECK(w[0] == "warning: ranks 0,1,2 on host n run 3 OpenMP threads in all on the same 2 CPU(s) (0-1) while the "
                  "host has 4 CPUs for its 4 threads: give each rank its own cores (mpi_scripts/retexo_run.sh, mpirun "
                  "--map-by slot:PE=1 --bind-to core, srun --cpu-bind=cores where Slurm binds tasks)");

    SECTION("crowded ranks that share no CPU form separate groups")
    {
        const std::vector<rank_placement> two{on("n", 6, 1, {0}), on("n", 6, 1, {1}), on("n", 6, 1, {0}),
                                              on("n", 6, 1, {1}), on("n", 6, 2, {4, 5})};
        CHECK(crowded_groups(two, {0, 1, 2, 3, 4}, 1) == groups{{0, 2}, {1, 3}});
        const auto m = placement_warnings(two);
        REQUIRE(m.size() == 2);
        CHECK(m[0].rfind("warning: ranks 0,2 on host n run 2 OpenMP threads in all on the same 1 CPU(s) (0) ", 0) == 0);
        CHECK(m[1].rfind("warning: ranks 1,3 on host n run 2 OpenMP threads in all on the same 1 CPU(s) (1) ", 0) == 0);
    }
    SECTION("groups name rank ids, not positions among the members")
    {
        CHECK(crowded_groups(ranks, {1, 3}, 1).empty());
        CHECK(crowded_groups(ranks, {3, 1, 2, 0}, 1) == groups{{1, 2, 0}});
    }
}

TEST_CASE("placement: a record survives its word form", "[placement]")
{
    const std::vector<rank_placement> ranks{
        on("", 1, 1, {}),
        on("node007", 64, 3, {0, 63, 64, 130}, false, true),
        on("exactly8", 2, 2, {1}, true, false),
        on("a-rather-long-host.example.org", 256, 255, {5, 6, 7, 200, 255}, false, false),
    };
    std::vector<std::uint64_t> words;
    for (const auto& p : ranks) {
        const auto w = pack_placement(p);
        words.insert(words.end(), w.begin(), w.end());
    }
    CHECK(pack_placement(ranks[2]).size() == 5 + 1 + 1); // header, one word of name, one of mask
    CHECK(unpack_placements(words) == ranks);
}
