// libFuzzer target: the HDF5 graph loader on arbitrary bytes (seed it with real graph files:
// mutations of valid files reach far deeper than random bytes).  The input is opened as a
// file image in memory (HDF5's core driver, h5::file::open_image) and read by the same
// graph_file_reader / read_graph code as a file on disk.
#include "fuzz_support.hpp"

#include <retexo/io/graph_file.hpp>

#include <cstdint>

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    retexo::fuzz::init();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    try {
        const retexo::graph_file_reader reader(
            retexo::h5::file::open_image(retexo::fuzz::chars(data, size), "graph.h5"));
        (void)retexo::read_graph(reader);
    } catch (const retexo::error&) {
    }
    return 0;
}
