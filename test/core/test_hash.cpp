// Hashes (core/hash.hpp): an assignment's hash tells assignments apart; hex round trip.
#include "support/test_support.hpp"

#include <retexo/core/hash.hpp>

using namespace retexo;

TEST_CASE("hash identifies the assignment", "[core]")
{
    const std::vector<part_t> a = {0, 1, 1, 0};
    auto b = a;
    b[2] = 0;
    CHECK(assignment_hash(a, 2) != assignment_hash(b, 2));
    CHECK(assignment_hash(a, 2) != assignment_hash(a, 3));
    CHECK(hash_from_hex(hash_to_hex(assignment_hash(a, 2))) == assignment_hash(a, 2));
}

TEST_CASE("hash_from_hex refuses what is not 16 hexadecimal digits", "[core][bad-input]")
{
    CHECK(hash_to_hex(0x1234) == "0000000000001234");
    CHECK_THROWS_WITH(hash_from_hex("12g4567890abcdef"), Catch::Contains("is not a 16-digit hexadecimal"));
    CHECK_THROWS_WITH(hash_from_hex("1234"), Catch::Contains("is not a 16-digit hexadecimal"));
}
