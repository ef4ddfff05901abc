#include <retexo/graph/graph.hpp>

#include <retexo/core/rng.hpp>

#include <algorithm>

namespace retexo {

csr build_csr(node_t num_nodes, std::span<const node_t> src, std::span<const node_t> dst,
              const csr_build_options& options, csr_build_report* report)
{
    RETEXO_ENSURE(src.size() == dst.size(),
                  "retexo::build_csr: " << src.size() << " sources but " << dst.size() << " destinations");
    RETEXO_ENSURE(num_nodes >= 0, "retexo::build_csr: negative node count " << num_nodes);
    const auto n = static_cast<std::size_t>(num_nodes);
    const std::size_t m = src.size();
    csr_build_report rep;
    rep.input_edges = static_cast<offset_t>(m);

    std::vector<offset_t> count(n + 1, 0);
    for (std::size_t e = 0; e < m; ++e) {
        const node_t u = src[e];
        const node_t v = dst[e];
        RETEXO_ENSURE(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes,
                      "edge " << e << " (" << u << " -> " << v << ") has a node id outside [0, " << num_nodes << ")");
        if (u == v && options.drop_self_loops) {
            ++rep.self_loops_dropped;
            continue;
        }
        ++count[v + 1];
        if (options.symmetrise && u != v) ++count[u + 1];
    }
    for (std::size_t i = 0; i < n; ++i)
        count[i + 1] += count[i];

    std::vector<node_t> cols(static_cast<std::size_t>(count[n]));
    std::vector<offset_t> fill(count.begin(), count.end() - 1);
    for (std::size_t e = 0; e < m; ++e) {
        const node_t u = src[e];
        const node_t v = dst[e];
        if (u == v && options.drop_self_loops) continue;
        cols[fill[v]++] = u;
        if (options.symmetrise && u != v) cols[fill[u]++] = v;
    }
    fill.clear();
    fill.shrink_to_fit();

    // Sort each row; drop duplicates by compacting in place (row order is preserved).
    std::vector<offset_t> kept(n, 0);
#pragma omp parallel for schedule(dynamic, 4096)
    for (std::int64_t v = 0; v < static_cast<std::int64_t>(n); ++v) {
        auto* first = cols.data() + count[v];
        auto* last = cols.data() + count[v + 1];
        std::sort(first, last);
        kept[v] = options.drop_duplicates ? (std::unique(first, last) - first) : (last - first);
    }
    csr out;
    out.offsets.assign(n + 1, 0);
    offset_t write = 0;
    for (std::size_t v = 0; v < n; ++v) {
        const offset_t begin = count[v];
        if (write != begin) std::copy(cols.begin() + begin, cols.begin() + begin + kept[v], cols.begin() + write);
        write += kept[v];
        out.offsets[v + 1] = write;
    }
    rep.duplicates_dropped = count[n] - write;
    cols.resize(static_cast<std::size_t>(write));
    cols.shrink_to_fit();
    out.sources = std::move(cols);
    if (report != nullptr) *report = rep;
    return out;
}

csr transpose(const csr& in, node_t num_cols)
{
    const node_t rows = in.num_rows();
    csr out;
    out.offsets.assign(static_cast<std::size_t>(num_cols) + 1, 0);
    for (node_t c : in.sources)
        ++out.offsets[c + 1];
    for (node_t c = 0; c < num_cols; ++c)
        out.offsets[c + 1] += out.offsets[c];
    out.sources.resize(in.sources.size());
    std::vector<offset_t> fill(out.offsets.begin(), out.offsets.end() - 1);
    // Rows visited ascending, so every output row is sorted.
    for (node_t v = 0; v < rows; ++v)
        for (offset_t e = in.offsets[v]; e < in.offsets[v + 1]; ++e)
            out.sources[fill[in.sources[e]]++] = v;
    return out;
}

std::pair<std::vector<node_t>, std::vector<node_t>> split_rows_within(const csr& g, node_t limit)
{
    std::pair<std::vector<node_t>, std::vector<node_t>> split;
    for (node_t v = 0; v < g.num_rows(); ++v) {
        const auto src = g.row(v);
        const bool inside = std::all_of(src.begin(), src.end(), [&](node_t u) { return u < limit; });
        (inside ? split.first : split.second).push_back(v);
    }
    return split;
}

void validate_csr(const csr& g, node_t num_cols, const std::string& what)
{
    RETEXO_ENSURE(!g.offsets.empty() && g.offsets.front() == 0, what << ": CSR offsets must start at 0");
    RETEXO_ENSURE(g.offsets.back() == g.num_edges(), what << ": CSR offsets end at " << g.offsets.back()
                                                          << " but there are " << g.num_edges() << " edges");
    for (std::size_t i = 0; i + 1 < g.offsets.size(); ++i)
        RETEXO_ENSURE(g.offsets[i] <= g.offsets[i + 1], what << ": CSR offsets decrease at row " << i);
    for (std::size_t e = 0; e < g.sources.size(); ++e)
        RETEXO_ENSURE(g.sources[e] >= 0 && g.sources[e] < num_cols, what << ": edge " << e << " has source id "
                                                                         << g.sources[e] << " outside [0, " << num_cols
                                                                         << ")");
}

std::vector<split> split_membership(node_t num_nodes, std::span<const node_t> train, std::span<const node_t> valid,
                                    std::span<const node_t> test)
{
    std::vector<split> member(static_cast<std::size_t>(num_nodes), split::none);
    auto mark = [&](std::span<const node_t> ids, split s, const char* name) {
        for (node_t v : ids) {
            RETEXO_ENSURE(v >= 0 && v < num_nodes,
                          name << " split: node id " << v << " outside [0, " << num_nodes << ")");
            RETEXO_ENSURE(member[v] == split::none, name << " split: node " << v << " is already in another split");
            member[v] = s;
        }
    };
    mark(train, split::train, "train");
    mark(valid, split::valid, "valid");
    mark(test, split::test, "test");
    return member;
}

split_lists random_split(std::span<const std::int32_t> labels, int num_classes, const random_split_spec& spec)
{
    RETEXO_ENSURE(spec.train_per_class > 0,
                  "random split: train nodes per class must be positive, got " << spec.train_per_class);
    RETEXO_ENSURE(spec.num_valid >= 0 && spec.num_test >= 0,
                  "random split: valid and test counts must not be negative");
    RETEXO_ENSURE(num_classes > 0, "random split: number of classes must be positive");
    const auto n = static_cast<node_t>(labels.size());
    const counter_rng rng(spec.seed, rng_stream::random_split);
    // Each shuffle draws counters base + 2 .. base + length, so bases n + 1 apart never overlap.
    const auto stride = static_cast<std::uint64_t>(n) + 1;
    std::vector<std::vector<node_t>> by_class(static_cast<std::size_t>(num_classes));
    for (node_t v = 0; v < n; ++v) {
        RETEXO_ENSURE(labels[v] >= 0 && labels[v] < num_classes,
                      "random split: label " << labels[v] << " of node " << v << " is outside 0.." << num_classes - 1);
        by_class[labels[v]].push_back(v);
    }
    split_lists s;
    std::vector<char> in_train(static_cast<std::size_t>(n), 0);
    for (int c = 0; c < num_classes; ++c) {
        auto& ids = by_class[c];
        RETEXO_ENSURE(static_cast<node_t>(ids.size()) >= spec.train_per_class,
                      "random split: class " << c << " has " << ids.size() << " nodes, fewer than the "
                                             << spec.train_per_class << " train nodes per class asked for");
        seeded_shuffle(ids.begin(), ids.end(), rng, static_cast<std::uint64_t>(c) * stride);
        for (node_t i = 0; i < spec.train_per_class; ++i) {
            s.train.push_back(ids[i]);
            in_train[ids[i]] = 1;
        }
    }
    std::vector<node_t> rest;
    rest.reserve(static_cast<std::size_t>(n) - s.train.size());
    for (node_t v = 0; v < n; ++v)
        if (in_train[v] == 0) rest.push_back(v);
    RETEXO_ENSURE(static_cast<std::int64_t>(spec.num_valid) + spec.num_test <= static_cast<std::int64_t>(rest.size()),
                  "random split: " << spec.num_valid << " valid + " << spec.num_test << " test nodes exceed the "
                                   << rest.size() << " nodes left after train");
    seeded_shuffle(rest.begin(), rest.end(), rng, static_cast<std::uint64_t>(num_classes) * stride);
    s.valid.assign(rest.begin(), rest.begin() + spec.num_valid);
    s.test.assign(rest.begin() + spec.num_valid, rest.begin() + spec.num_valid + spec.num_test);
    for (auto* ids : {&s.train, &s.valid, &s.test})
        std::sort(ids->begin(), ids->end());
    return s;
}

void validate_graph(const graph& g, const std::string& source)
{
    const node_t n = g.num_nodes();
    validate_csr(g.in_edges, n, source);
    RETEXO_ENSURE(g.features.rows() == n, source << ": " << g.features.rows() << " feature rows for " << n << " nodes");
    RETEXO_ENSURE(static_cast<node_t>(g.labels.size()) == n,
                  source << ": " << g.labels.size() << " labels for " << n << " nodes");
    RETEXO_ENSURE(g.num_classes > 0, source << ": number of classes must be positive");
    for (std::size_t v = 0; v < g.labels.size(); ++v)
        RETEXO_ENSURE(g.labels[v] >= 0 && g.labels[v] < g.num_classes, source << ": label " << g.labels[v]
                                                                              << " of node " << v << " is outside 0.."
                                                                              << g.num_classes - 1);
    try {
        (void)split_membership(n, g.train, g.valid, g.test);
    } catch (const error& e) {
        RETEXO_THROW(source << ": " << e.what());
    }
}

} // namespace retexo
