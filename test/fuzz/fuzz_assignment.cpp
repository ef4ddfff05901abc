// libFuzzer target: the node -> partition assignment reader (plain or gzip text), reading the
// input from memory through read_assignment's memory overload: the code a file goes through.
#include "fuzz_support.hpp"

#include <retexo/io/assignment.hpp>
#include <retexo/partition/partitioner.hpp>

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto bytes = retexo::fuzz::chars(data, size);
    for (retexo::node_t n : {0, 1, 7, 64})
        for (retexo::part_t p : {1, 3}) {
            try {
                const auto a = retexo::read_assignment("assignment.txt", bytes, n, p, 0, n);
                retexo::check_no_empty_part(a, p);
            } catch (const retexo::error&) {
            }
        }
    try { // the slice of rows one rank keeps (retexo_mpi --partition FILE)
        (void)retexo::read_assignment("assignment.txt", bytes, 7, 3, 2, 3);
    } catch (const retexo::error&) {
    }
    return 0;
}
