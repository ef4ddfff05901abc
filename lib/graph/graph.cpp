// Whole graphs: split membership, random splits (per-class training nodes), validation.
#include <retexo/graph/graph.hpp>

#include <retexo/core/rng.hpp>

#include <algorithm>

namespace retexo {

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
