// Building a partition's halo plan (who sends which rows to whom) and its exchanges.
#include <retexo/comm/halo_plan.hpp>

#include <algorithm>
#include <thread>
#include <utility>

namespace retexo {

halo_plan::halo_plan(const mpi::communicator& comm, const partition_structure& p)
    : comm_(comm), num_owned_(p.num_owned()), num_halo_(p.num_halo())
{
    const int P = comm.size();
    recv_count_.assign(static_cast<std::size_t>(P), 0);
    recv_displ_.assign(static_cast<std::size_t>(P), 0);
    std::string err;
    for (node_t h = 0; h < num_halo_; ++h) {
        const part_t q = p.halo_owner[h];
        if (q < 0 || q >= P || q == comm.rank()) {
            err = "halo node " + std::to_string(p.halo_global[h]) + " has owner " + std::to_string(q) +
                  ", not another rank of the " + std::to_string(P) + "-rank job";
            break;
        }
        if (h > 0 && q < p.halo_owner[h - 1]) {
            err = "halo rows are not grouped by owner";
            break;
        }
        ++recv_count_[q];
    }
    comm.agree(err);
    for (int q = 1; q < P; ++q)
        recv_displ_[q] = recv_displ_[q - 1] + recv_count_[q - 1];

    // Tell every owner which of its nodes we need (global ids; setup traffic only).
    send_count_ = comm.alltoall(recv_count_, purpose::setup);
    send_displ_.assign(static_cast<std::size_t>(P), 0);
    std::int64_t total = 0;
    for (int q = 0; q < P; ++q) {
        send_displ_[q] = static_cast<int>(total);
        total += send_count_[q];
        RETEXO_ENSURE(total <= INT32_MAX, "retexo::halo_plan: more than 2^31 rows to send");
    }
    std::vector<node_t> wanted(static_cast<std::size_t>(total));
    comm.alltoallv(p.halo_global.data(), recv_count_.data(), recv_displ_.data(), wanted.data(), send_count_.data(),
                   send_displ_.data(), purpose::setup);
    send_rows_.resize(wanted.size());
    for (std::size_t i = 0; i < wanted.size() && err.empty(); ++i) {
        const auto it = std::lower_bound(p.owned_global.begin(), p.owned_global.end(), wanted[i]);
        if (it == p.owned_global.end() || *it != wanted[i]) {
            err = "a peer asked for node " + std::to_string(wanted[i]) + ", which rank " + std::to_string(comm.rank()) +
                  " does not own (inconsistent partitions)";
            break;
        }
        send_rows_[i] = static_cast<node_t>(it - p.owned_global.begin());
    }
    comm.agree(err);
    send_global_ = std::move(wanted);
    halo_global_ = p.halo_global;
}

halo_plan::~halo_plan()
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    for (auto& [bytes, t] : types_)
        MPI_Type_free(&t);
}

int halo_plan::num_sources() const noexcept
{
    return static_cast<int>(std::count_if(recv_count_.begin(), recv_count_.end(), [](int c) { return c > 0; }));
}

MPI_Datatype halo_plan::row_type(int bytes) const
{
    auto it = types_.find(bytes);
    if (it != types_.end()) return it->second;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    RETEXO_CHECK_MPI(MPI_Type_contiguous(bytes, MPI_BYTE, &t));
    RETEXO_CHECK_MPI(MPI_Type_commit(&t));
    types_.emplace(bytes, t);
    return t;
}

pending_exchange halo_plan::start(const void* send, void* recv, const std::vector<int>& scount,
                                  const std::vector<int>& sdispl, const std::vector<int>& rcount,
                                  const std::vector<int>& rdispl, int row_bytes, purpose p) const
{
    pending_exchange x;
    if (row_bytes == 0) return x;
    const MPI_Datatype t = row_type(row_bytes);
    RETEXO_CHECK_MPI(MPI_Ialltoallv(send, scount.data(), sdispl.data(), t, recv, rcount.data(), rdispl.data(), t,
                                    comm_.get(), &x.request_));
    std::uint64_t out = 0, in = 0, msgs = 0;
    for (int q = 0; q < comm_.size(); ++q) {
        if (q == comm_.rank()) continue;
        out += static_cast<std::uint64_t>(scount[q]) * static_cast<std::uint64_t>(row_bytes);
        in += static_cast<std::uint64_t>(rcount[q]) * static_cast<std::uint64_t>(row_bytes);
        msgs += scount[q] > 0 ? 1 : 0;
    }
    comm_.ledger().add(p, out, in, msgs);
    x.ready_ = std::chrono::steady_clock::now();
    if (comm_.network().enabled())
        x.ready_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(comm_.network().seconds(out)));
    return x;
}

pending_exchange halo_plan::start_forward_rows(const byte_rows& owned, byte_rows& halo, purpose p) const
{
    RETEXO_ENSURE(owned.rows() == num_owned_, "retexo::halo_plan::start_forward_rows: " << owned.rows() << " rows for "
                                                                                        << num_owned_ << " owned rows");
    std::vector<std::int32_t> length(static_cast<std::size_t>(num_owned_) + static_cast<std::size_t>(num_halo_));
    for (node_t r = 0; r < num_owned_; ++r) {
        const auto n = owned.offsets[r + 1] - owned.offsets[r];
        RETEXO_ENSURE(n < (std::int64_t{1} << 31),
                      "retexo::halo_plan::start_forward_rows: row " << r << " has " << n << " bytes");
        length[r] = static_cast<std::int32_t>(n);
    }
    forward(length.data(), length.data() + num_owned_, 1, p);
    halo.offsets.assign(static_cast<std::size_t>(num_halo_) + 1, 0);
    for (node_t h = 0; h < num_halo_; ++h)
        halo.offsets[h + 1] =
            halo.offsets[h] + length[static_cast<std::size_t>(num_owned_) + static_cast<std::size_t>(h)];
    halo.data.resize(static_cast<std::size_t>(halo.offsets.back()));
    // Byte counts per peer (an MPI count is an int: at most 2 GiB to one peer per exchange).
    const int P = comm_.size();
    for (auto* v : {&bytes_scount_, &bytes_sdispl_, &bytes_rcount_, &bytes_rdispl_})
        v->assign(static_cast<std::size_t>(P), 0);
    std::int64_t sent = 0;
    for (int q = 0; q < P; ++q) {
        std::int64_t s = 0;
        for (node_t row : send_rows(q))
            s += length[row];
        const std::int64_t r = halo.offsets[recv_displ_[q] + recv_count_[q]] - halo.offsets[recv_displ_[q]];
        RETEXO_ENSURE(s < (std::int64_t{1} << 31) && r < (std::int64_t{1} << 31) && sent + s < (std::int64_t{1} << 31),
                      "retexo::halo_plan::start_forward_rows: more than 2 GiB for one exchange");
        bytes_scount_[q] = static_cast<int>(s);
        bytes_sdispl_[q] = static_cast<int>(sent);
        bytes_rcount_[q] = static_cast<int>(r);
        bytes_rdispl_[q] = static_cast<int>(halo.offsets[recv_displ_[q]]);
        sent += s;
    }
    if (send_buf_.size() < static_cast<std::size_t>(sent)) send_buf_.resize(static_cast<std::size_t>(sent));
    auto* out = reinterpret_cast<std::uint8_t*>(send_buf_.data());
    for (node_t row : send_rows_) {
        const auto bytes = owned.row(row);
        out = std::copy(bytes.begin(), bytes.end(), out);
    }
    return start(send_buf_.data(), halo.data.data(), bytes_scount_, bytes_sdispl_, bytes_rcount_, bytes_rdispl_, 1, p);
}

pending_exchange::pending_exchange(pending_exchange&& o) noexcept
    : request_(std::exchange(o.request_, MPI_REQUEST_NULL)), ready_(o.ready_)
{
}

pending_exchange::~pending_exchange()
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0 || request_ == MPI_REQUEST_NULL) return;
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

bool pending_exchange::test()
{
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    RETEXO_CHECK_MPI(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
}

void pending_exchange::wait()
{
    if (request_ != MPI_REQUEST_NULL) RETEXO_CHECK_MPI(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    std::this_thread::sleep_until(ready_);
}

} // namespace retexo
