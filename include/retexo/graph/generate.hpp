#pragma once
/// @file generate.hpp
/// Synthetic graphs: a contextual stochastic block model (CSBM) with optional power-law
/// degrees.  Every random draw is counter-based, so a seed fixes the graph bit for bit,
/// whatever the thread count, and features can be produced in any row order (streaming).

#include <retexo/graph/graph.hpp>

namespace retexo {

struct csbm_options {
    node_t nodes = 10000;
    int classes = 5; ///< at least 2 and at most nodes
    int features = 64;
    double avg_degree = 10.0;    ///< mean undirected degree before de-duplication
    double homophily = 0.8;      ///< probability an edge joins two nodes of the same class
    double power_law = 0.0;      ///< degree exponent gamma > 2 for power-law degrees; 0 = off
    double feature_signal = 1.0; ///< norm of the class means relative to unit noise per dim
    double train_fraction = 0.1;
    double valid_fraction = 0.1;
    double test_fraction = 0.8;
    std::uint64_t seed = 42;
    std::string name = "csbm";

    /// Throws naming the option (as on the command line, e.g. "--nodes") if out of range.
    void validate() const;
};

/// Builds the structure once and produces feature rows on demand.
class csbm_generator {
public:
    explicit csbm_generator(const csbm_options& options);

    const csbm_options& options() const noexcept { return opt_; }
    graph_info info() const;
    const csr& in_edges() const noexcept { return in_edges_; }
    const std::vector<std::int32_t>& labels() const noexcept { return labels_; }
    const std::vector<node_t>& train() const noexcept { return train_; }
    const std::vector<node_t>& valid() const noexcept { return valid_; }
    const std::vector<node_t>& test() const noexcept { return test_; }

    /// Feature rows [row0, row0 + rows) into out (row-major).
    void feature_rows(node_t row0, node_t rows, float* out) const;

private:
    csbm_options opt_;
    csr in_edges_;
    std::vector<std::int32_t> labels_;
    std::vector<node_t> train_, valid_, test_;
    matrix_f means_; // classes x features
};

/// The whole graph in memory.
graph generate_csbm(const csbm_options& options);

} // namespace retexo
