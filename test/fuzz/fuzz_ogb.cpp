// libFuzzer target: the OGB raw-directory reader on arbitrary edge, feature, label and split
// files.  The directory is held in memory (convert_ogb's ogb_memory_dir overload: the same
// parsing code as for a directory on disk) and so is the graph file it makes, which is read
// back.  Every input must end in a clean retexo::error or a valid graph, never a crash.
#include "fuzz_support.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace {

/// The largest count tried in num-node-list and num-edge-list.  The converter sizes its arrays
/// by the counts before it reads the files they describe (O(n) memory for n nodes is by design:
/// a real dataset of that size needs it; read_edges reserves up to 4M edges up front), which
/// makes a large count a slow input rather than a finding.  Node counts from 2^31 on are still tried: they
/// are refused before anything is allocated.
constexpr std::uint64_t max_count = 1 << 16;

/// Whether a count file holds a number that is too large by that rule (saturating parse of
/// every run of digits; the reader decides what else is valid).
bool count_too_large(std::string_view text, bool nodes)
{
    std::uint64_t v = 0;
    bool digits = false;
    for (std::size_t i = 0; i <= text.size(); ++i) {
        const char c = i < text.size() ? text[i] : '\n';
        if (c >= '0' && c <= '9') {
            v = v > (std::uint64_t{1} << 60) ? v : v * 10 + static_cast<std::uint64_t>(c - '0');
            digits = true;
            continue;
        }
        if (digits && v > max_count && !(nodes && v >= (std::uint64_t{1} << 31))) return true;
        v = 0;
        digits = false;
    }
    return false;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    retexo::fuzz::init();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    // The first byte picks the file the input becomes; the others hold a small valid graph.
    static const char* const names[] = {"raw/edge.csv",      "raw/node-feat.csv",     "raw/node-label.csv",
                                        "split/s/train.csv", "raw/num-node-list.csv", "raw/num-edge-list.csv"};
    static const std::string valid[] = {
        "0,1\n1,2\n2,3\n", "1,0\n0,1\n1,1\n0,0\n", "0\n1\n1\n0\n", "0\n2\n", "4\n", "3\n"};
    const std::size_t which = size > 0 ? data[0] % 6 : 0;
    if (which >= 4 && count_too_large({reinterpret_cast<const char*>(data) + 1, size - 1}, which == 4))
        return -1; // not tried, and kept out of the corpus
    retexo::ogb_memory_dir dir;
    for (std::size_t i = 0; i < 6; ++i)
        dir.files[names[i]] =
            i == which && size > 0 ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1) : valid[i];
    dir.files["split/s/valid.csv"] = "1\n";
    dir.files["split/s/test.csv"] = "3\n";
    try {
        std::vector<char> image;
        retexo::convert_ogb(dir, image);
        (void)retexo::read_graph(retexo::graph_file_reader(retexo::h5::file::open_image(image, "out.h5")));
    } catch (const retexo::error&) {
    }
    return 0;
}
