// Neighbour aggregation (sum, mean, GCN, max) over local CSR plans, forward and backward.
#include <retexo/kernels/aggregate.hpp>

#include <algorithm>
#include <cmath>

namespace retexo {

aggregation::aggregation(const csr& g, node_t num_src, const aggregation_options& o)
    : kind_(o.kind), num_src_(num_src), has_backward_(o.backward)
{
    const node_t rows_in = g.num_rows();
    const bool self = o.self_loops || kind_ == aggregator::gcn;
    rows_ = rows_or_all(o.rows, rows_in);
    plan_ = in_edges_of_rows(g, num_src, rows_, self, "retexo::aggregation");
    std::span<const offset_t> deg = o.in_degree;
    std::vector<offset_t> own_deg;
    if (kind_ == aggregator::gcn) {
        if (deg.empty()) {
            RETEXO_ENSURE(num_src == rows_in,
                          "retexo::aggregation: gcn over halo rows needs in_degree of every source row");
            own_deg.resize(static_cast<std::size_t>(rows_in));
            for (node_t v = 0; v < rows_in; ++v)
                own_deg[v] = g.degree(v);
            deg = own_deg;
        }
        RETEXO_ENSURE(static_cast<node_t>(deg.size()) == num_src, "retexo::aggregation: in_degree has "
                                                                      << deg.size() << " entries for " << num_src
                                                                      << " source rows");
    }

    // Weights of the plan edges.
    const auto n_out = static_cast<node_t>(rows_.size());
    weight_.resize(plan_.sources.size());
    for (node_t i = 0; i < n_out; ++i) {
        const node_t v = rows_[i];
        const offset_t row_len = plan_.degree(i);
        for (offset_t e = plan_.offsets[i]; e < plan_.offsets[i + 1]; ++e) {
            double w = 1.0;
            if (kind_ == aggregator::mean) w = 1.0 / static_cast<double>(row_len);
            if (kind_ == aggregator::gcn) {
                const node_t u = plan_.sources[e];
                w = 1.0 / std::sqrt(static_cast<double>(deg[u] + 1) * static_cast<double>(deg[v] + 1));
            }
            weight_[e] = static_cast<float>(w);
        }
    }
    for (float w : weight_)
        max_weight_ = std::max(max_weight_, std::fabs(w));

    // Transpose for the gathering backward pass.
    if (!has_backward_) return;
    std::vector<offset_t> edge_of;
    back_ = transpose(plan_, num_src, &edge_of);
    back_weight_.resize(edge_of.size());
    for (std::size_t t = 0; t < edge_of.size(); ++t)
        back_weight_[t] = weight_[edge_of[t]];
}

void aggregation::backward_exact(const float* d_out, int width, int k, std::int64_t* acc, const node_t* argmax) const
{
    RETEXO_ENSURE(kind_ != aggregator::max || argmax != nullptr,
                  "retexo::aggregation::backward_exact: max aggregation needs the forward argmax");
    RETEXO_ENSURE(has_backward_, "retexo::aggregation::backward_exact: the plan was built forward-only");
    const double scale = std::ldexp(1.0, k);
    const auto& off = back_.offsets;
    const auto& dst = back_.sources;
#pragma omp parallel for schedule(dynamic, 256) if (worth_threads(static_cast <std::int64_t>(dst.size()) * width))
    for (node_t u = 0; u < num_src_; ++u) {
        std::int64_t* g = acc + static_cast<std::ptrdiff_t>(u) * width;
        for (offset_t e = off[u]; e < off[u + 1]; ++e) {
            const node_t o = dst[e];
            const float* d = d_out + static_cast<std::ptrdiff_t>(o) * width;
            if (kind_ == aggregator::max) {
                const node_t* am = argmax + static_cast<std::ptrdiff_t>(o) * width;
                for (int f = 0; f < width; ++f)
                    if (am[f] == u) g[f] += exact::fixed(static_cast<double>(d[f]), scale);
            } else {
                const double we = static_cast<double>(back_weight_[e]) * scale;
#pragma omp simd
                for (int f = 0; f < width; ++f)
                    g[f] += static_cast<std::int64_t>(we * static_cast<double>(d[f]));
            }
        }
    }
}

std::pair<std::vector<node_t>, std::vector<node_t>> aggregation::rows_within(node_t limit) const
{
    return split_rows_within(plan_, limit);
}

template void aggregation::forward<float, float>(const float*, int, float*, node_t*) const;
template void aggregation::forward<float, bf16>(const bf16*, int, float*, node_t*) const;
template void aggregation::forward<double, double>(const double*, int, double*, node_t*) const;
template void aggregation::forward_subset<float, float>(const float*, int, float*, node_t*, std::span<const node_t>,
                                                        node_t, node_t) const;
template void aggregation::forward_subset<double, double>(const double*, int, double*, node_t*, std::span<const node_t>,
                                                          node_t, node_t) const;
template void aggregation::backward<float>(const float*, int, float*, const node_t*) const;
template void aggregation::backward<double>(const double*, int, double*, const node_t*) const;

} // namespace retexo
