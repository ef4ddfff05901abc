// The MPI wrappers of comm/communicator.hpp: environment, datatypes, the byte-counting
// collectives and the agreement on errors.
#include <retexo/comm/communicator.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/core/memory.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <thread>

namespace retexo::mpi {

environment::environment(int& argc, char**& argv)
{
    int provided = 0;
    RETEXO_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
}

environment::~environment()
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized == 0) MPI_Finalize();
}

communicator::communicator(MPI_Comm comm) : comm_(comm)
{
    RETEXO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    RETEXO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

byte_ledger communicator::sum(const byte_ledger& mine) const
{
    // This reduction is control traffic too: count it.
    const auto bytes = static_cast<std::uint64_t>(2.0 * (size_ - 1) / size_ * 4 * num_purposes * sizeof(std::uint64_t));
    charge(purpose::control, bytes, bytes);
    // One reduction of the four counter arrays (the calls too: a run's calls per rank is their
    // sum over ranks / ranks).
    std::array<std::array<std::uint64_t, num_purposes>, 4> all = {mine.sent, mine.received, mine.messages, mine.calls};
    static_assert(sizeof(all) == 4 * num_purposes * sizeof(std::uint64_t), "contiguous counters");
    RETEXO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, all.data(), 4 * num_purposes, MPI_UINT64_T, MPI_SUM, comm_));
    byte_ledger total;
    total.sent = all[0];
    total.received = all[1];
    total.messages = all[2];
    total.calls = all[3];
    return total;
}

void communicator::charge(purpose p, std::uint64_t sent, std::uint64_t received, std::uint64_t msgs) const
{
    ledger_.add(p, sent, received, msgs);
    if (network_.enabled()) std::this_thread::sleep_for(std::chrono::duration<double>(network_.seconds(sent)));
}

void communicator::barrier() const
{
    RETEXO_CHECK_MPI(MPI_Barrier(comm_));
}

std::pair<int, int> communicator::ranks_on_node(const std::string& group) const
{
    MPI_Comm node = MPI_COMM_NULL, same = MPI_COMM_NULL;
    RETEXO_CHECK_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    fnv1a h;
    for (char c : group)
        h.feed(static_cast<std::uint8_t>(c));
    const auto color = static_cast<int>(h.value() & 0x7fffffffU);
    int rc = MPI_Comm_split(node, color, rank_, &same);
    int sizes[2] = {1, 1};
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &sizes[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(same, &sizes[1]);
    if (same != MPI_COMM_NULL) MPI_Comm_free(&same);
    MPI_Comm_free(&node);
    RETEXO_CHECK_MPI(rc);
    return {sizes[0], sizes[1]};
}

void ensure_memory(const communicator& comm, double bytes, const std::string& what)
{
    const auto room = available_memory();
    const auto [on_node, in_cgroup] = comm.ranks_on_node(room ? room->cgroup_path : std::string());
    std::string err;
    if (room) {
        const double node_share = static_cast<double>(room->node) / on_node;
        const bool by_cgroup = room->cgroup && static_cast<double>(*room->cgroup) / in_cgroup < node_share;
        const int sharing = by_cgroup ? in_cgroup : on_node;
        const double available = by_cgroup ? static_cast<double>(*room->cgroup) : static_cast<double>(room->node);
        const double share = available / sharing;
        if (bytes > share) {
            const auto size = [](double b) {
                std::ostringstream t;
                t << std::fixed << std::setprecision(b < 1e9 ? 0 : 1) << (b < 1e9 ? b / 1e6 : b / 1e9)
                  << (b < 1e9 ? " MB" : " GB");
                return t.str();
            };
            const std::string where =
                by_cgroup ? " in its memory cgroup " + room->cgroup_path : std::string(" on its node");
            std::ostringstream m;
            m << what << " needs at least " << size(bytes) << " on rank " << comm.rank() << ", but " << size(available)
              << " of memory is available "
              << (sharing > 1 ? "to the " + std::to_string(sharing) + " ranks" + where : "to it" + where);
            if (sharing > 1) m << " (" << size(share) << " each)";
            err = m.str();
        }
    }
    comm.agree(err, purpose::setup);
}

void communicator::idle_barrier() const
{
    MPI_Request request = MPI_REQUEST_NULL;
    RETEXO_CHECK_MPI(MPI_Ibarrier(comm_, &request));
    for (int done = 0;;) {
        RETEXO_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        if (done != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void communicator::broadcast(std::string& s, int root, purpose p) const
{
    auto len = static_cast<std::int64_t>(s.size());
    broadcast(std::span<std::int64_t>(&len, 1), root, p);
    s.resize(static_cast<std::size_t>(len));
    broadcast(std::span<char>(s.data(), s.size()), root, p);
}

std::vector<int> communicator::alltoall(std::span<const int> send_counts, purpose p) const
{
    RETEXO_ENSURE(static_cast<int>(send_counts.size()) == size_,
                  "retexo::mpi::alltoall: " << send_counts.size() << " counts for " << size_ << " ranks");
    std::vector<int> recv(static_cast<std::size_t>(size_));
    RETEXO_CHECK_MPI(MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, comm_));
    const auto bytes = static_cast<std::uint64_t>(size_ - 1) * sizeof(int);
    charge(p, bytes, bytes, static_cast<std::uint64_t>(size_ - 1));
    return recv;
}

byte_ledger communicator::agreement_charge(purpose p) const
{
    byte_ledger charge;
    const auto bytes = static_cast<std::uint64_t>(size_ - 1) * sizeof(int); // allgather's, below
    charge.add(p, bytes, bytes);
    return charge;
}

void communicator::agree(const std::string& local_error, purpose p) const
{
    const int failed = local_error.empty() ? 0 : 1;
    const auto flags = allgather(failed, p);
    const auto it = std::find(flags.begin(), flags.end(), 1);
    if (it == flags.end()) return;
    const int first = static_cast<int>(it - flags.begin());
    std::string message = local_error;
    broadcast(message, first, p);
    const auto count = std::count(flags.begin(), flags.end(), 1);
    if (size_ > 1 && count < size_) {
        message = "rank " + std::to_string(first) + ": " + message;
        if (count > 1) message += " (and " + std::to_string(count - 1) + " other rank(s) failed)";
    }
    throw agreed_error(message, __FILE__, __LINE__);
}

} // namespace retexo::mpi
