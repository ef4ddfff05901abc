// The contextual stochastic block model generator (counter-based draws: a seed fixes the graph).
#include <retexo/core/rng.hpp>
#include <retexo/graph/generate.hpp>

#include <algorithm>
#include <cmath>

namespace retexo {

void csbm_options::validate() const
{
    RETEXO_ENSURE(nodes > 0, "--nodes must be positive, got " << nodes);
    // One class would make a graph with nothing to classify (and a degenerate softmax).
    RETEXO_ENSURE(classes >= 2, "--classes must be at least 2, got " << classes);
    RETEXO_ENSURE(classes <= nodes, "--classes must be at most --nodes (" << nodes << "), got " << classes);
    RETEXO_ENSURE(features >= 1, "--features must be positive, got " << features);
    RETEXO_ENSURE(avg_degree >= 0 && avg_degree < nodes, "--avg-degree must be in [0, nodes), got " << avg_degree);
    RETEXO_ENSURE(homophily >= 0 && homophily <= 1, "--homophily must be in [0, 1], got " << homophily);
    RETEXO_ENSURE(power_law == 0 || (power_law > 2 && std::isfinite(power_law)),
                  "--power-law must be 0 (off) or a finite exponent > 2, got " << power_law);
    RETEXO_ENSURE(feature_signal >= 0 && std::isfinite(feature_signal),
                  "--feature-signal must be a finite number >= 0, got " << feature_signal);
    RETEXO_ENSURE(train_fraction >= 0 && valid_fraction >= 0 && test_fraction >= 0 &&
                      train_fraction + valid_fraction + test_fraction <= 1 + 1e-9,
                  "--train/--valid/--test fractions must be >= 0 and sum to at most 1");
}

namespace {
/// Index of the first cumulative weight > target (weights sampled proportionally).
node_t sample_cumulative(const std::vector<double>& cum, double target)
{
    const auto it = std::upper_bound(cum.begin(), cum.end(), target);
    return static_cast<node_t>(std::min<std::ptrdiff_t>(it - cum.begin(), static_cast<std::ptrdiff_t>(cum.size()) - 1));
}

/// The split: a seeded permutation of the nodes cut into train / valid / test (each sorted).
void draw_split(const csbm_options& o, std::vector<node_t>& train, std::vector<node_t>& valid,
                std::vector<node_t>& test)
{
    const node_t n = o.nodes;
    std::vector<node_t> perm(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v)
        perm[v] = v;
    seeded_shuffle(perm.begin(), perm.end(), counter_rng(o.seed, rng_stream::generate_split));
    const auto n_tr = static_cast<std::size_t>(o.train_fraction * n);
    const auto n_va = static_cast<std::size_t>(o.valid_fraction * n);
    const auto n_te = std::min(static_cast<std::size_t>(std::llround(o.test_fraction * n)),
                               static_cast<std::size_t>(n) - n_tr - n_va);
    train.assign(perm.begin(), perm.begin() + n_tr);
    valid.assign(perm.begin() + n_tr, perm.begin() + n_tr + n_va);
    test.assign(perm.begin() + n_tr + n_va, perm.begin() + n_tr + n_va + n_te);
    std::sort(train.begin(), train.end());
    std::sort(valid.begin(), valid.end());
    std::sort(test.begin(), test.end());
}
} // namespace

csbm_generator::csbm_generator(const csbm_options& options) : opt_(options)
{
    opt_.validate();
    const node_t n = opt_.nodes;
    const int c = opt_.classes;

    // Labels: uniform over classes.
    const counter_rng label_rng(opt_.seed, rng_stream::generate_labels);
    labels_.resize(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v)
        labels_[v] = static_cast<std::int32_t>(label_rng.below(v, c));

    // Degree weights: 1, or Pareto with exponent gamma (Chung-Lu), capped at sqrt(n * d).
    const counter_rng weight_rng(opt_.seed, rng_stream::generate_weights);
    std::vector<double> weight(static_cast<std::size_t>(n), 1.0);
    if (opt_.power_law > 0) {
        const double cap = std::max(1.0, std::sqrt(static_cast<double>(n) * opt_.avg_degree));
        for (node_t v = 0; v < n; ++v) {
            const double u = weight_rng.uniform_double(v);
            weight[v] = std::min(cap, std::pow(1.0 - u, -1.0 / (opt_.power_law - 1.0)));
        }
    }
    // Nodes grouped by class with cumulative weights, for proportional sampling.
    std::vector<std::vector<node_t>> members(static_cast<std::size_t>(c));
    for (node_t v = 0; v < n; ++v)
        members[labels_[v]].push_back(v);
    std::vector<std::vector<double>> cum(static_cast<std::size_t>(c));
    std::vector<double> class_weight(static_cast<std::size_t>(c), 0.0);
    for (int cls = 0; cls < c; ++cls) {
        double s = 0;
        for (node_t v : members[cls])
            cum[cls].push_back(s += weight[v]);
        class_weight[cls] = s;
    }
    std::vector<double> all_cum(static_cast<std::size_t>(n));
    {
        double s = 0;
        for (node_t v = 0; v < n; ++v)
            all_cum[v] = s += weight[v];
    }
    std::vector<double> class_cum(static_cast<std::size_t>(c));
    {
        double s = 0;
        for (int cls = 0; cls < c; ++cls)
            class_cum[cls] = s += class_weight[cls];
    }

    // Edges: u proportional to weight; v in u's class with probability h, otherwise in
    // another class chosen proportionally to class weight.
    const auto m = static_cast<std::int64_t>(std::llround(opt_.avg_degree * n / 2.0));
    std::vector<node_t> src(static_cast<std::size_t>(m)), dst(static_cast<std::size_t>(m));
    const counter_rng edge_rng(opt_.seed, rng_stream::generate_edges);
    const double total = all_cum.back();
#pragma omp parallel for schedule(static)
    for (std::int64_t e = 0; e < m; ++e) {
        const auto base = static_cast<std::uint64_t>(e) * 4;
        const node_t u = sample_cumulative(all_cum, edge_rng.uniform_double(base) * total);
        const int cu = labels_[u];
        int cv = cu;
        const double others = total - class_weight[cu];
        if (c > 1 && others > 0 && edge_rng.uniform_double(base + 1) >= opt_.homophily) {
            // Another class: sample over the classes' weights with u's class removed.
            double t = edge_rng.uniform_double(base + 2) * others;
            const double before = cu > 0 ? class_cum[cu - 1] : 0.0;
            if (t >= before) t += class_weight[cu];
            cv = static_cast<int>(std::min<std::ptrdiff_t>(
                std::upper_bound(class_cum.begin(), class_cum.end(), t) - class_cum.begin(), c - 1));
            if (cum[cv].empty()) cv = cu; // floating-point edge case
        }
        const auto& cc = cum[cv];
        const double target = edge_rng.uniform_double(base + 3) * cc.back();
        src[e] = u;
        dst[e] = members[cv][sample_cumulative(cc, target)];
    }
    in_edges_ = build_csr(n, src, dst, {.symmetrise = true});
    release(src);
    release(dst);

    draw_split(opt_, train_, valid_, test_);

    // Class means: Gaussian directions with norm about feature_signal.
    const counter_rng mean_rng(opt_.seed, rng_stream::generate_means);
    means_.resize(c, opt_.features);
    const double scale = opt_.feature_signal / std::sqrt(static_cast<double>(opt_.features));
    for (int cls = 0; cls < c; ++cls)
        for (int f = 0; f < opt_.features; ++f)
            means_(cls, f) =
                static_cast<float>(scale * mean_rng.normal(static_cast<std::uint64_t>(cls) * opt_.features + f));
}

graph_info csbm_generator::info() const
{
    return {opt_.name, false, opt_.nodes, in_edges_.num_edges(), opt_.features, opt_.classes};
}

void csbm_generator::feature_rows(node_t row0, node_t rows, float* out) const
{
    const counter_rng noise(opt_.seed, rng_stream::generate_features);
    const int f = opt_.features;
#pragma omp parallel for schedule(static)
    for (node_t r = 0; r < rows; ++r) {
        const node_t v = row0 + r;
        float* row = out + static_cast<std::ptrdiff_t>(r) * f;
        const auto base = static_cast<std::uint64_t>(v) * static_cast<std::uint64_t>(f);
        for (int j = 0; j < f; ++j)
            row[j] = means_(labels_[v], j) + static_cast<float>(noise.normal(base + j));
    }
}

graph generate_csbm(const csbm_options& options)
{
    const csbm_generator gen(options);
    graph g;
    g.name = options.name;
    g.directed = false;
    g.num_classes = options.classes;
    g.in_edges = gen.in_edges();
    g.labels = gen.labels();
    g.train = gen.train();
    g.valid = gen.valid();
    g.test = gen.test();
    matrix_f x(options.nodes, options.features);
    gen.feature_rows(0, options.nodes, x.data());
    g.features = std::move(x);
    return g;
}

} // namespace retexo
