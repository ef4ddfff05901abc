// gen_ogb_npz: write a synthetic dataset in OGB's binary raw layout (raw/data.npz,
// raw/node-label.npz, split/s/*.csv), streaming, to measure retexo_convert's memory on a
// graph whose features are far larger than its CSR.
//   gen_ogb_npz DIR [--nodes N] [--edges E] [--features F] [--classes C] [--stored]
//               [--unlabelled PERCENT]
// Edge e joins hash(e) mod N -> hash'(e) mod N; features are hashed uniform values in
// [-1, 1); PERCENT% of the nodes get a NaN label and no split.
#include <retexo/io/npz.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace {

std::uint64_t mix(std::uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

} // namespace

int main(int argc, char** argv)
{
    using namespace retexo;
    if (argc < 2 || std::string(argv[1]) == "--help") {
        std::cerr << "usage: gen_ogb_npz DIR [--nodes N] [--edges E] [--features F] [--classes C] [--stored] "
                     "[--unlabelled PERCENT]\n";
        return 2;
    }
    const std::string dir = argv[1];
    std::int64_t n = 1000000, m = 4000000, f = 128, classes = 172, unlabelled_pct = 20;
    bool stored = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&] {
            if (i + 1 >= argc) {
                std::cerr << a << " needs a value\n";
                std::exit(2);
            }
            return std::stoll(argv[++i]);
        };
        if (a == "--nodes")
            n = value();
        else if (a == "--edges")
            m = value();
        else if (a == "--features")
            f = value();
        else if (a == "--classes")
            classes = value();
        else if (a == "--unlabelled")
            unlabelled_pct = value();
        else if (a == "--stored")
            stored = true;
        else {
            std::cerr << "unknown option " << a << "\n";
            return 2;
        }
    }
    try {
        namespace fs = std::filesystem;
        fs::create_directories(dir + "/raw");
        fs::create_directories(dir + "/split/s");
        const npz_writer::entry_options o{.deflate = !stored, .zip64 = true};
        npz_writer w(dir + "/raw/data.npz", true);
        constexpr std::int64_t block = 1 << 16;
        std::vector<std::int64_t> ids(block);
        w.begin_array("edge_index", "<i8", {2, m}, o);
        for (int row = 0; row < 2; ++row)
            for (std::int64_t e0 = 0; e0 < m; e0 += block) {
                const std::int64_t k = std::min(block, m - e0);
                for (std::int64_t j = 0; j < k; ++j)
                    ids[j] = static_cast<std::int64_t>(mix(static_cast<std::uint64_t>(2 * (e0 + j) + row)) %
                                                       static_cast<std::uint64_t>(n));
                w.write(ids.data(), static_cast<std::size_t>(k) * sizeof(std::int64_t));
            }
        w.end_entry();
        w.begin_array("node_feat", "<f4", {n, f}, o);
        std::vector<float> row(static_cast<std::size_t>(f));
        for (std::int64_t v = 0; v < n; ++v) {
            for (std::int64_t c = 0; c < f; ++c)
                row[c] = static_cast<float>(mix(static_cast<std::uint64_t>(v * f + c) ^ 0xABCDEFULL) >> 40) /
                             static_cast<float>(1 << 23) -
                         1.0F;
            w.write(row.data(), row.size() * sizeof(float));
        }
        w.end_entry();
        const std::int64_t nn[] = {n}, ne[] = {m};
        w.add<std::int64_t>("num_nodes_list", "<i8", {1}, nn, o);
        w.add<std::int64_t>("num_edges_list", "<i8", {1}, ne, o);
        w.close();

        npz_writer lw(dir + "/raw/node-label.npz", true);
        lw.begin_array("node_label", "<f4", {n, 1}, o);
        std::ofstream train(dir + "/split/s/train.csv"), valid(dir + "/split/s/valid.csv"),
            test(dir + "/split/s/test.csv");
        for (std::int64_t v = 0; v < n; ++v) {
            const auto h = mix(static_cast<std::uint64_t>(v) ^ 0x5EEDULL);
            const bool labelled = static_cast<std::int64_t>(h % 100) >= unlabelled_pct;
            const float y = labelled ? static_cast<float>((h >> 8) % static_cast<std::uint64_t>(classes))
                                     : std::numeric_limits<float>::quiet_NaN();
            lw.write(&y, sizeof y);
            if (!labelled) continue;
            const auto s = (h >> 32) % 10;
            (s < 6 ? train : s < 8 ? valid : test) << v << "\n";
        }
        lw.end_entry();
        lw.close();
        std::cout << "wrote " << dir << ": " << n << " nodes, " << m << " edges, " << f << " float32 features ("
                  << static_cast<double>(n * f * 4) / (1 << 20) << " MiB), " << (stored ? "stored" : "deflated")
                  << "\n";
    } catch (const std::exception& e) {
        std::cerr << "gen_ogb_npz: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
