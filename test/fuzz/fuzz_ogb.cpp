// libFuzzer target: the OGB raw-directory reader on arbitrary edge, feature, label and split
// files.  Every input must end in a clean retexo::error or a valid graph, never a crash.
#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {
void put(const std::string& path, const std::uint8_t* data, std::size_t size)
{
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    namespace fs = std::filesystem;
    static const std::string dir = fs::temp_directory_path() / ("retexo-fuzz-ogb-" + std::to_string(::getpid()));
    fs::create_directories(dir + "/raw");
    fs::create_directories(dir + "/split/s");
    // The first byte picks the file the input becomes; the others hold a small valid graph.
    const char* names[] = {"raw/edge.csv",      "raw/node-feat.csv",     "raw/node-label.csv",
                           "split/s/train.csv", "raw/num-node-list.csv", "raw/num-edge-list.csv"};
    const std::size_t which = size > 0 ? data[0] % 6 : 0;
    const std::string valid[] = {"0,1\n1,2\n2,3\n", "1,0\n0,1\n1,1\n0,0\n", "0\n1\n1\n0\n", "0\n2\n", "4\n", "3\n"};
    for (std::size_t i = 0; i < 6; ++i) {
        const std::string path = dir + "/" + names[i];
        if (i == which && size > 0)
            put(path, data + 1, size - 1);
        else
            std::ofstream(path) << valid[i];
    }
    std::ofstream(dir + "/split/s/valid.csv") << "1\n";
    std::ofstream(dir + "/split/s/test.csv") << "3\n";
    try {
        retexo::convert_ogb(dir, dir + "/out.h5");
        (void)retexo::read_graph(dir + "/out.h5");
    } catch (const retexo::error&) {
    }
    return 0;
}
