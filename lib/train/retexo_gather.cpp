// Gathered rows: with --replicate-train every rank trains a stage on every rank's training rows
// (and, in graph stages, their neighbourhoods); a search side by side evaluates its candidates
// on every rank's validation rows.
#include "retexo_run.hpp"

#include <algorithm>
#include <numeric>

namespace retexo::train::detail {

node_features retexo_run::allgather_rows(const retexo_stage& s, const node_features& x, std::span<const node_t> rows,
                                         std::int64_t n) const
{
    const auto& comm = ctx_.comm;
    auto gather = [&]<typename T>(const std::vector<T>& v) {
        return comm.allgatherv(std::span<const T>(v), purpose::train_rows);
    };
    const node_features mine = x.select_rows(rows);
    // The storage of each column block (dense, sparse) and its width.
    fnv1a layout;
    mine.for_each_block([&]<typename X>(const X& b, Eigen::Index) {
        layout.feed(static_cast<std::uint32_t>(std::is_same_v<X, matrix_f> ? 0 : 1));
        layout.feed(static_cast<std::uint32_t>(cols_of(b)));
    });
    const auto storage = static_cast<std::int64_t>(layout.value() >> 1U);
    RETEXO_ENSURE(comm.allreduce(storage, MPI_MIN, purpose::train_rows) ==
                      comm.allreduce(storage, MPI_MAX, purpose::train_rows),
                  "--replicate-train: the ranks hold stage "
                      << s.index << "'s inputs in different storage (dense, sparse, blocks)");
    const auto gather_dense = [&](const matrix_f& d) {
        std::vector<float> v(d.data(), d.data() + d.size());
        v = gather(v);
        return matrix_f(Eigen::Map<const matrix_f>(v.data(), n, d.cols()));
    };
    const auto gather_sparse = [&](const csr_matrix& m) {
        std::vector<std::int32_t> nnz(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i)
            nnz[i] = static_cast<std::int32_t>(m.row_nnz(static_cast<std::int64_t>(i)));
        nnz = gather(nnz);
        csr_matrix c(n, m.cols);
        for (std::int64_t i = 0; i < n; ++i)
            c.offsets[static_cast<std::size_t>(i) + 1] =
                c.offsets[static_cast<std::size_t>(i)] + nnz[static_cast<std::size_t>(i)];
        c.indices = gather(m.indices);
        c.values = gather(m.values);
        return c;
    };
    const auto gather_block = [&]<typename X>(const X& b) -> column_blocks::block {
        if constexpr (std::is_same_v<X, matrix_f>)
            return gather_dense(b);
        else
            return gather_sparse(b);
    };
    std::vector<column_blocks::block> gathered;
    mine.for_each_block([&](const auto& b, Eigen::Index) { gathered.push_back(gather_block(b)); });
    return from_blocks(std::move(gathered));
}

namespace {
/// The positions that put ids in ascending order.
std::vector<node_t> ascending(const std::vector<node_t>& ids)
{
    std::vector<node_t> order(ids.size());
    std::iota(order.begin(), order.end(), node_t{0});
    std::sort(order.begin(), order.end(),
              [&](node_t a, node_t b) { return ids[static_cast<std::size_t>(a)] < ids[static_cast<std::size_t>(b)]; });
    return order;
}
} // namespace

retexo_stage::gathered_rows retexo_run::gather_rows(const retexo_stage& s, const node_features& x,
                                                    const std::vector<node_t>& rows,
                                                    const std::vector<std::int32_t>& labels) const
{
    const auto& comm = ctx_.comm;
    std::vector<node_t> ids;
    std::vector<std::int32_t> mine;
    for (node_t r : rows) {
        ids.push_back(local_ids_[r]);
        mine.push_back(labels[static_cast<std::size_t>(r)]);
    }
    ids = comm.allgatherv(std::span<const node_t>(ids), purpose::train_rows);
    mine = comm.allgatherv(std::span<const std::int32_t>(mine), purpose::train_rows);
    const node_features all = allgather_rows(s, x, rows, static_cast<std::int64_t>(ids.size()));
    const auto order = ascending(ids);
    retexo_stage::gathered_rows g;
    g.x = all.select_rows(order);
    for (node_t i : order) {
        g.ids.push_back(ids[static_cast<std::size_t>(i)]);
        g.labels.push_back(mine[static_cast<std::size_t>(i)]);
    }
    g.rows.resize(order.size());
    std::iota(g.rows.begin(), g.rows.end(), node_t{0});
    return g;
}

retexo_stage::gathered_rows retexo_run::gather_graph(const retexo_stage& s, const node_features& x,
                                                     const std::vector<node_t>& rows,
                                                     const std::vector<std::int32_t>& labels,
                                                     const nn::local_graph& tg) const
{
    const auto& comm = ctx_.comm;
    auto gather = [&]<typename T>(const std::vector<T>& v) {
        return comm.allgatherv(std::span<const T>(v), purpose::train_rows);
    };
    // Every rank's rows: id, label and in-neighbours' ids.
    std::vector<node_t> dst, src;
    std::vector<std::int32_t> mine, count;
    for (node_t r : rows) {
        dst.push_back(local_ids_[r]);
        mine.push_back(labels[static_cast<std::size_t>(r)]);
        const auto in = tg.in_edges->row(r);
        count.push_back(static_cast<std::int32_t>(in.size()));
        for (node_t u : in)
            src.push_back(local_ids_[u]);
    }
    dst = gather(dst);
    mine = gather(mine);
    count = gather(count);
    src = gather(src);
    // The rows they read, each sent by its owner (whose copy is exact).
    std::vector<node_t> need = dst;
    need.insert(need.end(), src.begin(), src.end());
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
    std::vector<node_t> owned, owned_ids;
    std::vector<offset_t> degree;
    for (node_t r = 0; r < own_; ++r)
        if (std::binary_search(need.begin(), need.end(), local_ids_[r])) {
            owned.push_back(r);
            owned_ids.push_back(local_ids_[r]);
            degree.push_back(tg.in_degree[static_cast<std::size_t>(r)]);
        }
    owned_ids = gather(owned_ids);
    degree = gather(degree);
    const node_features all = allgather_rows(s, x, owned, static_cast<std::int64_t>(owned_ids.size()));
    RETEXO_ENSURE(owned_ids.size() == need.size(), "--replicate-train: stage " << s.index << " gathered "
                                                                               << owned_ids.size() << " rows of "
                                                                               << need.size() << " its rows read");
    const auto order = ascending(owned_ids);
    retexo_stage::gathered_rows g;
    g.x = all.select_rows(order);
    g.ids = need;
    for (node_t i : order)
        g.degree.push_back(degree[static_cast<std::size_t>(i)]);
    const auto position = [&](node_t id) {
        return static_cast<node_t>(std::lower_bound(need.begin(), need.end(), id) - need.begin());
    };
    // The rows' in-edges, in their owners' order (the whole graph's: the float sums of an
    // attention softmax depend on it).
    const auto n = static_cast<std::size_t>(need.size());
    std::vector<std::vector<node_t>> in(n);
    g.labels.assign(n, -1);
    std::size_t e = 0;
    for (std::size_t i = 0; i < dst.size(); ++i) {
        const node_t v = position(dst[i]);
        g.labels[static_cast<std::size_t>(v)] = mine[i];
        g.rows.push_back(v);
        auto& row = in[static_cast<std::size_t>(v)];
        for (std::int32_t k = 0; k < count[i]; ++k)
            row.push_back(position(src[e++]));
    }
    std::sort(g.rows.begin(), g.rows.end());
    for (const auto& row : in) {
        g.in_edges.sources.insert(g.in_edges.sources.end(), row.begin(), row.end());
        g.in_edges.offsets.push_back(static_cast<offset_t>(g.in_edges.sources.size()));
    }
    return g;
}

void retexo_run::gather_evaluation_rows(retexo_stage& s)
{
    phase_timer::scope sc(meter_.timer, "exchange");
    s.all_eval.clear();
    for (const auto* rows : {&ctx_.valid_rows, &ctx_.test_rows}) {
        if (rows == &ctx_.test_rows && !o_.track_test) break;
        auto& e = s.all_eval.emplace_back();
        e.rows = s.graph ? gather_graph(s, s.x.all, *rows, ctx_.part.labels, ctx_.graph)
                         : gather_rows(s, s.x.all, *rows, ctx_.part.labels);
        const auto n = e.rows.rows.size(), P = static_cast<std::size_t>(ctx_.comm.size());
        for (std::size_t c = 0; c < P; ++c)
            e.chunks.push_back(
                {.rows = std::vector<node_t>(e.rows.rows.begin() + static_cast<std::ptrdiff_t>(n * c / P),
                                             e.rows.rows.begin() + static_cast<std::ptrdiff_t>(n * (c + 1) / P))});
    }
}

void retexo_run::evaluate_gathered(retexo_stage& s, epoch_record& rec)
{
    phase_timer::scope sc(meter_.timer, "eval");
    for (std::size_t k = 0; k < s.all_eval.size(); ++k) { // validation, then test
        auto& e = s.all_eval[k];
        auto& pe = e.pass;
        std::int64_t correct = 0;
        loss_result loss;
        for (const auto& c : e.chunks) {
            pe.rows = c.rows;
            pe.plan = c.plan ? &*c.plan : nullptr;
            stage_logits(s, pe, e.rows.x, e.rows.ids);
            std::vector<node_t> seq(pe.rows.size());
            std::vector<std::int32_t> labels(pe.rows.size());
            for (std::size_t i = 0; i < seq.size(); ++i) {
                seq[i] = static_cast<node_t>(i);
                labels[i] = e.rows.labels[static_cast<std::size_t>(pe.rows[i])];
            }
            correct += count_correct(pe.logits.data(), C_, labels, seq);
            if (k > 0 || (o_.select != selection::loss && !o_.search.active())) continue;
            const loss_result part =
                softmax_cross_entropy(pe.logits.data(), C_, labels, seq, 1.0F, static_cast<float*>(nullptr), valid_k_);
            loss.sum += part.sum;
            loss.count += part.count;
            loss.exact_sum += part.exact_sum;
        }
        const auto n = static_cast<std::int64_t>(e.rows.rows.size());
        (k == 0 ? rec.acc.valid : rec.acc.test) = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
        if (k == 0 && (o_.select == selection::loss || o_.search.active()))
            rec.valid_loss = mean_loss(loss, std::max<std::int64_t>(1, n), valid_k_);
    }
}

} // namespace retexo::train::detail
