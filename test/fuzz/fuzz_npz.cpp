// libFuzzer target: the OGB binary layout (raw/data.npz, raw/node-label.npz) on arbitrary
// archives and arrays.  The archives are written and read in memory (npz_writer's and
// convert_ogb's memory overloads: the same parsing code as for files), and so is the graph
// file made, which is read back.  Every input must end in a clean retexo::error or a valid
// graph, never a crash.
#include "fuzz_support.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/io/npz.hpp>
#include <retexo/io/ogb.hpp>

#include <cstdint>
#include <string>

namespace {

/// A .npy array's bytes (version 1.0 header).
std::string npy(const std::string& descr, const std::string& shape, const void* data, std::size_t bytes)
{
    std::string d = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + d.size() + 1) % 64 != 0)
        d += ' ';
    d += '\n';
    std::string h("\x93NUMPY\x01\x00", 8);
    h += static_cast<char>(d.size() & 0xFF);
    h += static_cast<char>(d.size() >> 8);
    return h + d + std::string(static_cast<const char*>(data), bytes);
}

// A valid 4-node graph.
const std::int64_t edges[] = {0, 1, 2, 1, 2, 3};
const float feats[] = {1, 0, 0, 1, 1, 1, 0, 0};
const std::int64_t nn[] = {4}, ne[] = {3};
const double labels[] = {0, 1, __builtin_nan(""), 0};

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    retexo::fuzz::init();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using retexo::npz_writer;
    static const std::string valid[] = {npy("<i8", "(2, 3)", edges, sizeof edges),
                                        npy("<f4", "(4, 2)", feats, sizeof feats), npy("<i8", "(1,)", nn, sizeof nn),
                                        npy("<i8", "(1,)", ne, sizeof ne), npy("<f8", "(4, 1)", labels, sizeof labels)};
    static const char* const names[] = {"edge_index.npy", "node_feat.npy", "num_nodes_list.npy", "num_edges_list.npy",
                                        "node_label.npy"};
    // The first byte picks what the rest of the input replaces: the whole data.npz, or the
    // .npy bytes of one array (stored or deflated).
    const std::size_t mode = size > 0 ? data[0] % 11 : 0;
    const std::string input(reinterpret_cast<const char*>(data) + (size > 0 ? 1 : 0), size > 0 ? size - 1 : 0);
    const std::size_t which = mode < 10 ? mode % 5 : 5; // array replaced (5: the whole data.npz)
    const npz_writer::entry_options o{.deflate = mode >= 5 && mode < 10};
    retexo::ogb_memory_dir dir;
    try {
        {
            npz_writer w(&dir.files["raw/data.npz"], "raw/data.npz");
            for (std::size_t i = 0; i < 4; ++i) {
                w.begin_entry(names[i], o);
                const std::string& bytes = i == which ? input : valid[i];
                w.write(bytes.data(), bytes.size());
                w.end_entry();
            }
            w.close();
            npz_writer l(&dir.files["raw/node-label.npz"], "raw/node-label.npz");
            l.begin_entry(names[4], o);
            const std::string& bytes = which == 4 ? input : valid[4];
            l.write(bytes.data(), bytes.size());
            l.end_entry();
            l.close();
        }
        if (which == 5) dir.files["raw/data.npz"] = input;
        dir.files["split/s/train.csv"] = "0\n";
        dir.files["split/s/valid.csv"] = "1\n";
        dir.files["split/s/test.csv"] = "3\n";
        std::vector<char> image;
        retexo::convert_ogb(dir, image);
        (void)retexo::read_graph(retexo::graph_file_reader(retexo::h5::file::open_image(image, "out.h5")));
    } catch (const retexo::error&) {
    }
    return 0;
}
