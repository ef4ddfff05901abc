#pragma once
// A rank's view of a tiny random graph, for layer and stage-model tests: 12 owned rows,
// 4 halo rows (sources only), 40 random in-edges.

#include <retexo/core/rng.hpp>
#include <retexo/nn/layers.hpp>

namespace retexo::test {

struct toy_graph {
    csr g;
    std::vector<offset_t> degree;
    nn::local_graph lg;
    std::vector<node_t> ids; ///< global ids of the 16 local rows

    explicit toy_graph(std::uint64_t seed = 7)
    {
        const counter_rng rng(seed, seed);
        std::vector<node_t> src, dst;
        for (std::uint64_t e = 0; e < 40; ++e) {
            src.push_back(static_cast<node_t>(rng.below(2 * e, 16)));
            dst.push_back(static_cast<node_t>(rng.below(2 * e + 1, 12)));
        }
        g = build_csr(16, src, dst);
        g.offsets.resize(13); // keep the 12 owned rows
        g.sources.resize(static_cast<std::size_t>(g.offsets.back()));
        degree.resize(16);
        for (node_t v = 0; v < 16; ++v)
            degree[v] = v < 12 ? g.degree(v) : 1 + v % 3;
        lg = {&g, 12, 16, degree};
        for (node_t v = 0; v < 16; ++v)
            ids.push_back(100 + 3 * v);
    }
    toy_graph(const toy_graph&) = delete; // lg points into g and degree
    toy_graph& operator=(const toy_graph&) = delete;
};

} // namespace retexo::test
