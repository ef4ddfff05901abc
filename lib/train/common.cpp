// What both trainers share: the rank context, gradient sync, losses and accuracies, the run meter.
#include <retexo/core/hash.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/train/common.hpp>

#include <algorithm>
#include <cmath>

namespace retexo::train {

rank_context::rank_context(const mpi::communicator& c, const local_partition& p, bool ind)
    : comm(c), part(p), inductive(ind)
{
    // Checked on each rank alone (no collective yet): a rank with another's part would
    // otherwise fail later, in the halo plan, with a message about owners.
    RETEXO_ENSURE(p.num_parts == c.size() && p.part == c.rank(),
                  (p.source.empty() ? p.global.name : p.source)
                      << ": rank " << c.rank() << " of " << c.size() << " was given part " << p.part << " of "
                      << p.num_parts << "; each rank trains its own part of as many parts as ranks");
    const byte_ledger before = c.ledger();
    graph = nn::make_local_graph(p, degree);
    halo = std::make_unique<halo_plan>(c, p);
    train_graph = graph;
    if (inductive) {
        // Split membership of every local row (halo rows from their owners).
        const node_t own = p.num_owned();
        std::vector<std::int8_t> member(static_cast<std::size_t>(p.num_local()));
        for (node_t v = 0; v < own; ++v)
            member[v] = static_cast<std::int8_t>(p.membership[v]);
        halo->forward(member.data(), member.data() + own, 1, purpose::setup);
        auto evaluation = [&](node_t u) {
            const auto s = static_cast<split>(member[u]);
            return s == split::valid || s == split::test;
        };
        train_edges.offsets.assign(static_cast<std::size_t>(own) + 1, 0);
        for (node_t v = 0; v < own; ++v) {
            if (!evaluation(v))
                for (node_t u : p.in_edges.row(v))
                    if (!evaluation(u)) train_edges.sources.push_back(u);
            train_edges.offsets[v + 1] = static_cast<offset_t>(train_edges.sources.size());
        }
        train_degree.resize(static_cast<std::size_t>(p.num_local()));
        for (node_t v = 0; v < own; ++v)
            train_degree[v] = train_edges.degree(v);
        halo->forward(train_degree.data(), train_degree.data() + own, 1, purpose::setup);
        train_graph = {&train_edges, own, p.num_local(), train_degree};
        for (node_t u = 0; u < p.num_local(); ++u)
            if (evaluation(u)) evaluation_rows.push_back(u);
    }
    train_rows = p.nodes_in(split::train);
    valid_rows = p.nodes_in(split::valid);
    test_rows = p.nodes_in(split::test);
    owned_rows.resize(static_cast<std::size_t>(p.num_owned()));
    for (node_t v = 0; v < p.num_owned(); ++v)
        owned_rows[v] = v;
    std::int64_t counts[5] = {static_cast<std::int64_t>(train_rows.size()),
                              static_cast<std::int64_t>(valid_rows.size()), static_cast<std::int64_t>(test_rows.size()),
                              p.num_owned(), p.in_edges.num_edges()};
    comm.allreduce(std::span<std::int64_t>(counts, 5), MPI_SUM, purpose::setup);
    global_train = counts[0];
    global_valid = counts[1];
    global_test = counts[2];
    global_nodes = counts[3];
    global_edges = counts[4];
    setup_bytes = c.ledger() - before;
    // Every rank has the same counts, so every rank throws the same (agreed) error.
    const std::string& source = p.source.empty() ? p.global.name : p.source;
    RETEXO_ENSURE_AGREED(global_train > 0, source << ": the graph has no training nodes");
    // Training chooses its model on the validation nodes (RETEXO's rounds and stages, the
    // standard trainer's best epoch): with none, it would choose on nothing.
    RETEXO_ENSURE_AGREED(global_valid > 0, source << ": the graph has no validation nodes (split/valid is empty), "
                                                     "on which training chooses its model");
}

void rank_context::hide_evaluation_rows(node_features& x) const
{
    if (x.is_sparse()) {
        x.sparse().clear_rows(evaluation_rows);
        return;
    }
    auto& d = x.dense();
    for (node_t u : evaluation_rows)
        if (u < d.rows()) d.row(u).setZero();
}

nn::reduce_mode rank_context::reduce(bool exact) const
{
    nn::reduce_mode m;
    m.exact = exact;
    const mpi::communicator* c = &comm;
    m.global_max = [c](std::span<double> v) { c->allreduce(v, MPI_MAX, purpose::control); };
    m.global_terms = static_cast<double>(global_nodes + global_edges + 1);
    return m;
}

void allreduce_gradients(const mpi::communicator& comm, const std::vector<parameter<float>*>& params, bool exact)
{
    std::size_t total = 0;
    for (auto* p : params) {
        total += static_cast<std::size_t>(p->size());
        RETEXO_ENSURE(!exact || p->exact.size() == static_cast<std::size_t>(p->size()),
                      "internal: exact gradient of " << p->name << " was not computed");
    }
    if (comm.size() == 1) { // already the sum: no copies, no call
        if (exact)
            for (auto* p : params)
                nn::finish_exact_gradient(*p);
        return;
    }
    if (exact) {
        std::vector<std::int64_t> buf;
        buf.reserve(total);
        for (auto* p : params)
            buf.insert(buf.end(), p->exact.begin(), p->exact.end());
        comm.allreduce(std::span<std::int64_t>(buf), MPI_SUM, purpose::gradients);
        std::size_t off = 0;
        for (auto* p : params) {
            std::copy_n(buf.begin() + static_cast<std::ptrdiff_t>(off), p->size(), p->exact.begin());
            nn::finish_exact_gradient(*p);
            off += static_cast<std::size_t>(p->size());
        }
        return;
    }
    std::vector<float> buf;
    buf.reserve(total);
    for (auto* p : params)
        buf.insert(buf.end(), p->grad.data(), p->grad.data() + p->size());
    comm.allreduce(std::span<float>(buf), MPI_SUM, purpose::gradients);
    std::size_t off = 0;
    for (auto* p : params) {
        std::copy_n(buf.begin() + static_cast<std::ptrdiff_t>(off), p->size(), p->grad.data());
        off += static_cast<std::size_t>(p->size());
    }
}

void agree_initial_parameters(const mpi::communicator& comm, const std::vector<parameter<float>*>& params)
{
    if (comm.size() == 1) return; // nothing to agree with (the digest costs ~4 cycles a byte)
    fnv1a h;
    for (const auto* p : params)
        h.feed(std::span<const float>(p->value.data(), static_cast<std::size_t>(p->size())));
    const auto digests = comm.allgather(h.value(), purpose::parameters);
    if (std::all_of(digests.begin(), digests.end(), [&](std::uint64_t d) { return d == digests[0]; })) return;
    std::vector<float> buf;
    for (auto* p : params)
        buf.insert(buf.end(), p->value.data(), p->value.data() + p->size());
    comm.broadcast(std::span<float>(buf), 0, purpose::parameters);
    std::size_t off = 0;
    for (auto* p : params) {
        std::copy_n(buf.begin() + static_cast<std::ptrdiff_t>(off), p->size(), p->value.data());
        off += static_cast<std::size_t>(p->size());
    }
}

std::vector<matrix_f> snapshot(const std::vector<parameter<float>*>& params)
{
    std::vector<matrix_f> v;
    v.reserve(params.size());
    for (auto* p : params)
        v.push_back(p->value);
    return v;
}

void restore(const std::vector<parameter<float>*>& params, const std::vector<matrix_f>& values)
{
    for (std::size_t i = 0; i < params.size(); ++i)
        params[i]->value = values[i];
}

run_meter::run_meter(const rank_context& ctx)
    : ctx_(ctx), start_(ctx.comm.ledger()), t0_(std::chrono::steady_clock::now())
{
}

void run_meter::resume(const byte_ledger& done, double elapsed, const std::map<std::string, double>& phases)
{
    start_ = ctx_.comm.ledger() - done;
    t0_ = std::chrono::steady_clock::now() -
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(elapsed));
    for (const auto& [phase, seconds] : phases)
        timer.add(phase, seconds);
}

std::uint64_t run_meter::all_bytes() const
{
    return ctx_.comm.allreduce((traffic() + ctx_.setup_bytes).total_sent(), MPI_SUM, purpose::control);
}

double run_meter::elapsed() const
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void run_meter::record(epoch_record rec, run_result& r, const progress_fn& progress, std::optional<std::uint64_t> bytes)
{
    phase_timer::scope sc(timer, "sync");
    // One number per round, not the whole ledger: metering should not weigh in the bytes.
    rec.bytes = bytes ? *bytes : all_bytes();
    rec.calls = traffic().total_calls();
    rec.seconds = elapsed();
    r.history.push_back(rec);
    if (progress) progress(rec);
}

run_result run_meter::finish(run_result r) const
{
    r.nodes = {.train = ctx_.global_train, .valid = ctx_.global_valid, .test = ctx_.global_test};
    r.seconds = timer.seconds();
    double timed = 0;
    for (const auto& [phase, seconds] : r.seconds)
        timed += seconds;
    r.seconds["total"] = elapsed();
    r.seconds["other"] = std::max(0.0, r.seconds["total"] - timed); // in no phase
    const byte_ledger mine = traffic() + ctx_.setup_bytes;
    r.max_rank_bytes = ctx_.comm.allreduce(mine.total_sent(), MPI_MAX, purpose::control);
    r.bytes = ctx_.comm.sum(mine);
    return r;
}

std::vector<named_network> paper_networks()
{
    return {{"datacenter_10Gbps", {10e9, 50e-6}},
            {"wan_1Gbps", {1e9, 20e-3}},
            {"proximity_100Mbps", {100e6, 5e-3}},
            {"edge_10Mbps", {10e6, 30e-3}}};
}

double emulated_seconds(const run_result& r, const network_model& m)
{
    const auto it = r.seconds.find("total");
    const double measured = it == r.seconds.end() ? 0.0 : it->second;
    const double calls_per_rank = static_cast<double>(r.bytes.total_calls()) / std::max(1, r.ranks);
    return measured + 8.0 * static_cast<double>(r.max_rank_bytes) / m.bandwidth_bits_per_s +
           calls_per_rank * m.latency_s;
}

std::vector<named_tensor> named_values(const std::vector<parameter<float>*>& params, const std::string& prefix)
{
    std::vector<named_tensor> v;
    v.reserve(params.size());
    for (auto* p : params)
        v.push_back({prefix + p->name, p->value});
    return v;
}

void softmax_rows(matrix_f& x)
{
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        float top = x(i, 0);
        for (Eigen::Index j = 1; j < x.cols(); ++j)
            top = std::max(top, x(i, j));
        float sum = 0;
        for (Eigen::Index j = 0; j < x.cols(); ++j)
            sum += x(i, j) = std::exp(x(i, j) - top);
        for (Eigen::Index j = 0; j < x.cols(); ++j)
            x(i, j) /= sum;
    }
}

accuracies reduce_accuracies(const rank_context& ctx, const matrix_f& logits)
{
    const int c = static_cast<int>(logits.cols());
    const auto& labels = ctx.part.labels;
    std::int64_t counts[3] = {count_correct(logits.data(), c, labels, ctx.train_rows),
                              count_correct(logits.data(), c, labels, ctx.valid_rows),
                              count_correct(logits.data(), c, labels, ctx.test_rows)};
    ctx.comm.allreduce(std::span<std::int64_t>(counts, 3), MPI_SUM, purpose::metrics);
    auto ratio = [](std::int64_t a, std::int64_t b) {
        return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
    };
    return {ratio(counts[0], ctx.global_train), ratio(counts[1], ctx.global_valid), ratio(counts[2], ctx.global_test)};
}

int loss_exponent(std::int64_t rows)
{
    return exact::scale_exponent(static_cast<double>(rows) * 1024.0);
}

double mean_loss(const loss_result& all, std::int64_t count, int exact_k)
{
    if (exact_k >= 0) return std::ldexp(static_cast<double>(all.exact_sum), -exact_k) / static_cast<double>(count);
    return all.sum / static_cast<double>(count);
}

double reduce_loss(const mpi::communicator& comm, const loss_result& local, std::int64_t global_count, int exact_k)
{
    loss_result all = local;
    if (exact_k >= 0)
        all.exact_sum = comm.allreduce(local.exact_sum, MPI_SUM, purpose::metrics);
    else
        all.sum = comm.allreduce(local.sum, MPI_SUM, purpose::metrics);
    return mean_loss(all, global_count, exact_k);
}

} // namespace retexo::train
