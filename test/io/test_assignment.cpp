// Assignment files (io/assignment.hpp): written and read back, refused with the file and line
// at fault, and make_partition's given method.
#include "support/test_support.hpp"

#include <retexo/core/hash.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/partition_files.hpp>

using namespace retexo;

TEST_CASE("a given assignment round-trips exactly", "[io]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(40, {{0, 1}, {1, 2}, {2, 39}, {20, 21}}, 3, 2);
    write_graph(g, tmp / "g.h5");
    std::vector<part_t> a(40);
    for (node_t v = 0; v < 40; ++v)
        a[v] = static_cast<part_t>((v * 7 + 3) % 3);
    write_assignment(tmp / "a.txt", a);
    partition_options o{.method = partition_method::given, .parts = 3, .assignment_file = tmp / "a.txt"};
    const auto b = make_partition(g.in_edges, false, o);
    CHECK(b == a);
    write_partitioned(tmp / "g.h5", b, o, tmp / "parts");
    CHECK(read_assignment(tmp / "parts/assignment.txt", 40, 3) == a);
    const auto m = read_manifest(tmp / "parts");
    CHECK(m.assignment_hash == assignment_hash(a, 3));
    CHECK(m.method == "given");
    for (part_t p = 0; p < 3; ++p) {
        const auto lp = load_partition(tmp / "parts", p);
        for (node_t v : lp.owned_global)
            CHECK(a[v] == p);
    }
}

TEST_CASE("assignment files are validated", "[io][bad-input]")
{
    test::temp_dir tmp;
    SECTION("wrong length")
    {
        test::write_file(tmp / "a.txt", "0\n1\n0\n");
        CHECK_THROWS_WITH(read_assignment(tmp / "a.txt", 4, 2),
                          Catch::Contains("a.txt: 3 lines, but the graph has 4 nodes"));
        test::write_file(tmp / "b.txt", "0\n1\n0\n1\n1\n");
        CHECK_THROWS_WITH(read_assignment(tmp / "b.txt", 4, 2), Catch::Contains("more than 4 lines"));
    }
    SECTION("id >= P")
    {
        test::write_file(tmp / "a.txt", "0\n1\n2\n0\n");
        CHECK_THROWS_WITH(read_assignment(tmp / "a.txt", 4, 2),
                          Catch::Contains("a.txt:3: partition id 2 is outside [0, 2)"));
    }
    SECTION("not a number")
    {
        test::write_file(tmp / "a.txt", "0\nx\n");
        CHECK_THROWS_WITH(read_assignment(tmp / "a.txt", 2, 2), Catch::Contains("a.txt:2: 'x' is not a valid integer"));
    }
    SECTION("missing")
    {
        CHECK_THROWS_WITH(read_assignment(tmp / "none.txt", 2, 2), Catch::Contains("none.txt: cannot open"));
    }
    SECTION("gzip accepted")
    {
        test::write_file(tmp / "a.txt.gz", "0\n1\n1\n");
        CHECK(read_assignment(tmp / "a.txt.gz", 3, 2) == std::vector<part_t>{0, 1, 1});
    }
}

TEST_CASE("an empty partition is rejected", "[io][bad-input]")
{
    const auto g = test::make_graph(3, {{0, 1}}, 2, 2);
    CHECK_THROWS_WITH(make_partition(g.in_edges, false, {.method = partition_method::random, .parts = 4}),
                      Catch::Contains("partition 3 of 4 is empty"));
    test::temp_dir tmp;
    test::write_file(tmp / "a.txt", "0\n0\n2\n");
    CHECK_THROWS_WITH(make_partition(g.in_edges, false,
                                     {.method = partition_method::given, .parts = 3, .assignment_file = tmp / "a.txt"}),
                      Catch::Contains("partition 1 of 3 is empty"));
}
