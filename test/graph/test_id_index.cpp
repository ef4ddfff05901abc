#include "support/test_support.hpp"

#include <retexo/ingest/id_index.hpp>

#include <algorithm>
#include <random>

using namespace retexo;

TEST_CASE("id_index answers membership and position as a binary search over the ids does", "[graph][ingest]")
{
    // Sizes around the 64-bit words: empty, one word, a partial last word, dense and sparse.
    for (const node_t n : {0, 1, 63, 64, 65, 1000}) {
        for (const double density : {0.0, 0.03, 0.5, 1.0}) {
            std::mt19937 rng(static_cast<unsigned>(n * 7 + static_cast<int>(density * 100)));
            std::vector<node_t> ids;
            for (node_t v = 0; v < n; ++v)
                if (std::uniform_real_distribution<>(0, 1)(rng) < density) ids.push_back(v);
            const id_index index(ids, n);
            bool same = true;
            for (node_t v = -2; v < n + 70; ++v) {
                const bool member = std::binary_search(ids.begin(), ids.end(), v);
                same = same && index.contains(v) == member;
                if (member)
                    same = same && index.position(v) == std::lower_bound(ids.begin(), ids.end(), v) - ids.begin();
            }
            CAPTURE(n, density, ids.size());
            CHECK(same);
        }
    }
}

TEST_CASE("id_index refuses ids that are not ascending, distinct and in range", "[graph][ingest][bad-input]")
{
    CHECK_THROWS_WITH(id_index(std::vector<node_t>{1, 1}, 5), Catch::Contains("ascending, distinct"));
    CHECK_THROWS_WITH(id_index(std::vector<node_t>{3, 2}, 5), Catch::Contains("got 2"));
    CHECK_THROWS_WITH(id_index(std::vector<node_t>{0, 5}, 5), Catch::Contains("in [0, 5), got 5"));
    CHECK_THROWS_WITH(id_index(std::vector<node_t>{-1}, 5), Catch::Contains("got -1"));
}
