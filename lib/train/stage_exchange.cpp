// A RETEXO stage's one exchange of inputs: sparse or dense wire, fp32/bf16/int8, column blocks.
#include <retexo/comm/overlap.hpp>
#include <retexo/kernels/quantize.hpp>
#include <retexo/kernels/sparse.hpp>
#include <retexo/train/stage_exchange.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace retexo::train {

namespace {

/// Zero the rows of x listed in `rows` that fall in [begin, end).
template <typename T>
void zero_rows(matrix<T>& x, std::span<const node_t> rows, node_t begin, node_t end)
{
    for (node_t u : rows)
        if (u >= begin && u < end) x.row(u).setZero();
}

/// One block of a stage's inputs on the wire: every local row of it, stored as T (float for
/// fp32, bf16 below) in x (resized; its storage kept when the size is), the owned rows set
/// and the halo rows arriving.  Stays in place while the exchange is in flight (MPI writes
/// the halo rows).
template <typename T>
class in_flight {
public:
    in_flight(const halo_plan& halo, const matrix_f& h, wire_format wire, purpose traffic, std::span<const node_t> zero,
              phase_timer& timer, matrix<T>& x)
        : zero_(zero), own_(halo.num_owned()), x_(x), pending_(start(halo, h, wire, traffic, timer))
    {
        zero_rows(x_, zero_, 0, own_);
    }
    in_flight(const in_flight&) = delete;
    in_flight& operator=(const in_flight&) = delete;

    bool test() { return pending_.test(); }
    /// Completes the exchange: the halo rows are set.
    void wait()
    {
        pending_.wait();
        const node_t local = static_cast<node_t>(x_.rows());
        if (!got_.empty())
            dequantize_int8(got_.data(), local - own_, static_cast<int>(x_.cols()),
                            x_.data() + static_cast<std::ptrdiff_t>(own_) * x_.cols());
        zero_rows(x_, zero_, own_, local);
    }
    const matrix<T>& rows() const noexcept { return x_; }
    matrix<T>& rows() noexcept { return x_; }

private:
    /// Sets the owned rows (rounded to the wire precision) and starts the exchange.
    pending_exchange start(const halo_plan& halo, const matrix_f& h, wire_format wire, purpose traffic,
                           phase_timer& timer)
    {
        const auto f = static_cast<int>(h.cols());
        x_.resize(own_ + halo.num_halo(), f);
        if (wire.scaled()) {
            const int w = int8_row_bytes(f);
            sent_.resize(static_cast<std::size_t>(own_) * w);
            got_.resize(static_cast<std::size_t>(halo.num_halo()) * w);
            quantize_int8(h.data(), own_, f, sent_.data());
            dequantize_int8(sent_.data(), own_, f, x_.data());
            phase_timer::scope s(timer, "exchange");
            return halo.start_forward(sent_.data(), got_.data(), w, traffic);
        }
        if constexpr (std::is_same_v<T, float>)
            x_.topRows(own_) = h;
        else
            for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(own_) * f; ++i)
                x_.data()[i] = T(h.data()[i]);
        phase_timer::scope s(timer, "exchange");
        return halo.start_forward(h.data(), x_.data() + static_cast<std::ptrdiff_t>(own_) * f, f, traffic);
    }

    std::span<const node_t> zero_;
    node_t own_;
    matrix<T>& x_;
    std::vector<std::uint8_t> sent_, got_; // int8: the quantised rows
    pending_exchange pending_;
};

/// Sparse rows on the wire, per row: [the row's header (int8: its scale)] [column ids:
/// uint16 when there are at most 65536 columns, else int32] [values as the wire format
/// stores them].  Values are rounded as the dense wire rounds them (wire_format::round), so
/// a sparse exchange gives the dense exchange's values bit for bit.
class sparse_wire {
public:
    sparse_wire(wire_format wire, std::int64_t cols) : wire_(wire), idx_(cols <= 65536 ? 2 : 4) {}
    std::int64_t row_bytes(offset_t nnz) const noexcept
    {
        return wire_.row_header() + nnz * (idx_ + wire_.value_bytes);
    }

    /// x's values as the receivers will see them.
    void round(csr_matrix& x) const
    {
        if (wire_.value_bytes == 4) return;
#pragma omp parallel for schedule(static)
        for (std::int64_t i = 0; i < x.rows; ++i) {
            const float s = scale(x, i);
            for (offset_t e = x.offsets[i]; e < x.offsets[i + 1]; ++e)
                x.values[e] = wire_.round(x.values[e], s);
        }
    }
    byte_rows encode(const csr_matrix& x) const
    {
        byte_rows b;
        b.offsets.resize(static_cast<std::size_t>(x.rows) + 1);
        for (std::int64_t i = 0; i < x.rows; ++i)
            b.offsets[i + 1] = b.offsets[i] + row_bytes(x.row_nnz(i));
        b.data.resize(static_cast<std::size_t>(b.offsets.back()));
#pragma omp parallel for schedule(static)
        for (std::int64_t i = 0; i < x.rows; ++i) {
            std::uint8_t* o = b.data.data() + b.offsets[i];
            const float s = scale(x, i);
            if (wire_.scaled()) o = put(o, s);
            for (std::int32_t j : x.row_indices(i))
                o = idx_ == 2 ? put(o, static_cast<std::uint16_t>(j)) : put(o, j);
            for (float v : x.row_values(i)) {
                if (wire_.value_bytes == 4)
                    o = put(o, v);
                else if (wire_.value_bytes == 2)
                    o = put(o, bf16(v));
                else
                    o = put(o, static_cast<std::int8_t>(int8_quantize(v, int8_inverse(s))));
            }
        }
        return b;
    }
    /// Appends the rows of b to x.
    void decode(const byte_rows& b, csr_matrix& x) const
    {
        for (std::int64_t r = 0; r < b.rows(); ++r) {
            const auto row = b.row(r);
            const auto nnz = static_cast<std::int64_t>((static_cast<std::int64_t>(row.size()) - wire_.row_header()) /
                                                       (idx_ + wire_.value_bytes));
            const std::uint8_t* in = row.data();
            float s = 0;
            if (wire_.scaled()) in = get(in, s);
            for (std::int64_t k = 0; k < nnz; ++k) {
                std::int32_t j = 0;
                if (idx_ == 2) {
                    std::uint16_t j16 = 0;
                    in = get(in, j16);
                    j = j16;
                } else {
                    in = get(in, j);
                }
                x.indices.push_back(j);
            }
            for (std::int64_t k = 0; k < nnz; ++k) {
                float v = 0;
                if (wire_.value_bytes == 4) {
                    in = get(in, v);
                } else if (wire_.value_bytes == 2) {
                    bf16 q;
                    in = get(in, q);
                    v = static_cast<float>(q);
                } else {
                    std::int8_t q = 0;
                    in = get(in, q);
                    v = static_cast<float>(bf16(s * static_cast<float>(q)));
                }
                x.values.push_back(v);
            }
            x.offsets.push_back(static_cast<offset_t>(x.values.size()));
            ++x.rows;
        }
    }

private:
    float scale(const csr_matrix& x, std::int64_t i) const
    {
        return wire_.scale(x.row_values(i).data(), x.row_nnz(i));
    }
    template <typename V>
    static std::uint8_t* put(std::uint8_t* o, V v)
    {
        std::memcpy(o, &v, sizeof v);
        return o + sizeof v;
    }
    template <typename V>
    static const std::uint8_t* get(const std::uint8_t* in, V& v)
    {
        std::memcpy(&v, in, sizeof v);
        return in + sizeof v;
    }

    wire_format wire_;
    int idx_;
};

/// Sparse rows of a stage's inputs on the wire: the owned rows (rounded) while the halo rows
/// travel; after wait(), every local row.
class sparse_in_flight {
public:
    sparse_in_flight(const halo_plan& halo, const csr_matrix& h, wire_format wire, purpose traffic,
                     std::span<const node_t> zero, phase_timer& timer)
        : wire_(wire, h.cols), zero_(zero), own_(halo.num_owned()), x_(h)
    {
        x_.clear_rows(zero_); // owned rows to zero (halo rows after they arrive)
        const byte_rows owned = wire_.encode(x_);
        wire_.round(x_); // after encoding: the scales are the unrounded rows'
        // Until the halo rows arrive they are empty rows: every local row can be indexed.
        x_.offsets.resize(static_cast<std::size_t>(own_ + halo.num_halo()) + 1, x_.offsets.back());
        x_.rows = own_ + halo.num_halo();
        phase_timer::scope s(timer, "exchange");
        pending_.emplace(halo.start_forward_rows(owned, got_, traffic));
    }
    bool test() { return pending_->test(); }
    void wait()
    {
        pending_->wait();
        x_.offsets.resize(static_cast<std::size_t>(own_) + 1);
        x_.rows = own_;
        wire_.decode(got_, x_);
        release(got_);
        std::vector<node_t> halo_zero;
        for (node_t u : zero_)
            if (u >= own_) halo_zero.push_back(u);
        x_.clear_rows(halo_zero);
    }
    const csr_matrix& rows() const noexcept { return x_; }
    csr_matrix& rows() noexcept { return x_; }

private:
    sparse_wire wire_;
    std::span<const node_t> zero_;
    node_t own_;
    csr_matrix x_;
    byte_rows got_;
    std::optional<pending_exchange> pending_;
};

} // namespace

stage_exchange::stage_exchange(const halo_plan& halo, const stage_exchange_options& options, phase_timer& timer)
    : halo_(halo), o_(options), wire_(format_of(options.precision)), timer_(timer)
{
    RETEXO_ENSURE(o_.columns.value_or(0) >= 0, "--exchange-columns must be >= 0, got " << *o_.columns);
}

stage_exchange::~stage_exchange()
{
    halo_.release_buffers();
}

bool stage_exchange::sparse_wire_smaller(const csr_matrix& h) const
{
    const sparse_wire wire(wire_, h.cols);
    const std::int64_t dense_row = wire_.dense_row_bytes(h.cols);
    std::int64_t bytes[2] = {0, 0}; // dense, sparse
    for (int q = 0; q < halo_.comm().size(); ++q)
        for (node_t r : halo_.send_rows(q)) {
            bytes[0] += dense_row;
            bytes[1] += 4 + wire.row_bytes(h.row_nnz(r));
        }
    halo_.comm().allreduce(std::span<std::int64_t>(bytes, 2), MPI_SUM, purpose::control);
    return bytes[1] <= bytes[0]; // no row crosses (one rank): no reason to make them dense
}

node_features stage_exchange::local_rows(const node_features& h, std::span<const node_t> zero) const
{
    if (!h.is_sparse()) return local_rows_dense(h.dense(), zero);
    if (!sparse_wire_smaller(h.sparse())) return csr_matrix::from_dense(local_rows_dense(h.sparse().to_dense(), zero));
    sparse_in_flight x(halo_, h.sparse(), wire_, o_.traffic, zero, timer_);
    {
        phase_timer::scope s(timer_, "exchange");
        x.wait();
    }
    return std::move(x.rows());
}

csr_matrix stage_exchange::aggregate_rows(const csr_matrix& x, const nn::local_graph& g, aggregator kind,
                                          std::span<const node_t> rows) const
{
    phase_timer::scope s(timer_, "aggregate");
    const aggregation agg(*g.in_edges, static_cast<node_t>(x.rows),
                          aggregation_options{.kind = kind, .in_degree = g.in_degree, .rows = rows, .backward = false});
    return aggregate_sparse(agg, x);
}

matrix_f stage_exchange::local_rows_dense(const matrix_f& h, std::span<const node_t> zero) const
{
    if (wire_.value_bytes == 4) {
        matrix_f x;
        local_rows(h, x, zero);
        return x;
    }
    matrix<bf16> x;
    local_rows(h, x, zero);
    return x.cast<float>();
}

template <typename T>
void stage_exchange::local_rows(const matrix_f& h, matrix<T>& x, std::span<const node_t> zero) const
{
    RETEXO_ENSURE((sizeof(T) == 4) == (wire_.value_bytes == 4),
                  "stage_exchange::local_rows: rows of " << sizeof(T) << " bytes for a wire of " << wire_.value_bytes);
    in_flight<T> rows(halo_, h, wire_, o_.traffic, zero, timer_, x);
    phase_timer::scope s(timer_, "exchange");
    rows.wait();
}
template void stage_exchange::local_rows(const matrix_f&, matrix_f&, std::span<const node_t>) const;
template void stage_exchange::local_rows(const matrix_f&, matrix<bf16>&, std::span<const node_t>) const;

node_features stage_exchange::aggregate(const node_features& h, const nn::local_graph& g, aggregator kind,
                                        std::span<const node_t> zero) const
{
    if (!h.is_sparse())
        return wire_.value_bytes == 4 ? aggregate_as<float>(h.dense(), g, kind, zero)
                                      : aggregate_as<bf16>(h.dense(), g, kind, zero);
    csr_matrix a = aggregate_sparse_rows(h.sparse(), g, kind, zero);
    // Sparse while the whole aggregate (every rank's rows) is: the same storage on every rank,
    // whatever the partitioning.
    std::int64_t size[2] = {a.nnz(), a.rows * a.cols};
    halo_.comm().allreduce(std::span<std::int64_t>(size, 2), MPI_SUM, purpose::control);
    if (size[1] == 0 || static_cast<double>(size[0]) < sparse_density_limit * static_cast<double>(size[1])) return a;
    return a.to_dense();
}

csr_matrix stage_exchange::aggregate_sparse_rows(const csr_matrix& h, const nn::local_graph& g, aggregator kind,
                                                 std::span<const node_t> zero) const
{
    const node_t own = halo_.num_owned();
    const auto [interior, boundary] = split_rows_within(*g.in_edges, own);
    // Each chunk's rows are aggregated with their own plan; the chunks' rows are put back in
    // order at the end.
    std::vector<csr_matrix> parts;
    std::vector<std::span<const node_t>> part_rows;
    auto chunk = [&](const csr_matrix& x, std::span<const node_t> rows) {
        parts.push_back(aggregate_rows(x, g, kind, rows));
        part_rows.push_back(rows);
    };
    if (sparse_wire_smaller(h)) {
        // Before the halo rows arrive they are empty rows, which interior rows never read.
        sparse_in_flight x(halo_, h, wire_, o_.traffic, zero, timer_);
        overlap_rows(x, interior, boundary, o_.overlap, timer_,
                     [&](std::span<const node_t> rows, bool) { chunk(x.rows(), rows); });
    } else {
        const auto x = csr_matrix::from_dense(local_rows_dense(h.to_dense(), zero));
        for (const auto& rows : {std::span<const node_t>(interior), std::span<const node_t>(boundary)})
            for (std::size_t r0 = 0; r0 < rows.size(); r0 += overlap_chunk_rows)
                chunk(x, rows.subspan(r0, std::min(overlap_chunk_rows, rows.size() - r0)));
    }
    std::vector<std::pair<std::size_t, std::int64_t>> where(static_cast<std::size_t>(own));
    for (std::size_t p = 0; p < parts.size(); ++p)
        for (std::size_t i = 0; i < part_rows[p].size(); ++i)
            where[static_cast<std::size_t>(part_rows[p][i])] = {p, static_cast<std::int64_t>(i)};
    csr_matrix a(0, h.cols);
    for (const auto& [p, i] : where)
        a.push_row(parts[p].row_indices(i), parts[p].row_values(i));
    return a;
}

template <typename T>
matrix_f stage_exchange::aggregate_as(const matrix_f& h, const nn::local_graph& g, aggregator kind,
                                      std::span<const node_t> zero) const
{
    const node_t own = halo_.num_owned();
    const node_t local = own + halo_.num_halo();
    const auto F = static_cast<Eigen::Index>(h.cols());
    const auto [interior, boundary] = split_rows_within(*g.in_edges, own);
    matrix_f a(own, F);
    matrix_f out;
    matrix<T> storage; // one block's local rows, kept from block to block
    const int columns = o_.columns.value_or(0);
    const Eigen::Index block = columns > 0 ? std::min<Eigen::Index>(columns, F) : F;
    for (Eigen::Index c0 = 0; c0 < F; c0 += block) {
        const Eigen::Index w = std::min(block, F - c0);
        const matrix_f hb = w == F ? matrix_f() : matrix_f(h.middleCols(c0, w));
        in_flight<T> x(halo_, w == F ? h : hb, wire_, o_.traffic, zero, timer_, storage);
        // Rows are aggregated a chunk at a time, each chunk with its own plan (the sources
        // and weights of its edges): a few chunk-sized buffers instead of a plan of every
        // owned row.  Each output row is reduced alone in CSR order: chunks change no bit.
        overlap_rows(x, interior, boundary, o_.overlap, timer_, [&](std::span<const node_t> rows, bool halo_ready) {
            phase_timer::scope s(timer_, "aggregate");
            const aggregation agg(
                *g.in_edges, local,
                aggregation_options{.kind = kind, .in_degree = g.in_degree, .rows = rows, .backward = false});
            out.resize(static_cast<Eigen::Index>(rows.size()), w);
            agg.forward_subset(x.rows().data(), static_cast<int>(w), out.data(), nullptr, {}, 0,
                               halo_ready ? local : own);
            for (std::size_t i = 0; i < rows.size(); ++i)
                a.block(rows[i], c0, 1, w) = out.row(static_cast<Eigen::Index>(i));
        });
    }
    return a;
}

} // namespace retexo::train
