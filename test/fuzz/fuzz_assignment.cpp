// libFuzzer target: the node -> partition assignment reader (plain or gzip text).
#include <retexo/partition/partitioner.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const std::string path =
        std::filesystem::temp_directory_path() / ("retexo-fuzz-assignment-" + std::to_string(::getpid()) + ".txt");
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    for (retexo::node_t n : {0, 1, 7, 64})
        for (retexo::part_t p : {1, 3}) {
            try {
                const auto a = retexo::read_assignment(path, n, p);
                retexo::check_no_empty_part(a, p);
            } catch (const retexo::error&) {
            }
        }
    return 0;
}
