// libFuzzer target: the HDF5 graph loader on arbitrary bytes (seed it with real graph files:
// mutations of valid files reach far deeper than random bytes).
#include <retexo/io/graph_file.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const std::string path =
        std::filesystem::temp_directory_path() / ("retexo-fuzz-graph-" + std::to_string(::getpid()) + ".h5");
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    try {
        (void)retexo::read_graph(path);
    } catch (const retexo::error&) {
    }
    return 0;
}
