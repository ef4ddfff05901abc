#pragma once
// Template bodies of communicator.hpp, which includes this file at its end: include communicator.hpp, not this.

namespace retexo::mpi {

template <typename T>
void communicator::allreduce(std::span<T> data, MPI_Op op, purpose p) const
{
    RETEXO_ENSURE(data.size() <= static_cast<std::size_t>(INT32_MAX),
                  "retexo::mpi::allreduce: " << data.size() << " elements exceed an int count");
    RETEXO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), datatype<T>(), op, comm_));
    const auto bytes = static_cast<std::uint64_t>(2.0 * (size_ - 1) / size_ * static_cast<double>(data.size_bytes()));
    charge(p, bytes, bytes);
}

template <typename T>
void communicator::broadcast(std::span<T> data, int root, purpose p) const
{
    RETEXO_ENSURE(data.size() <= static_cast<std::size_t>(INT32_MAX),
                  "retexo::mpi::broadcast: " << data.size() << " elements exceed an int count");
    RETEXO_CHECK_MPI(MPI_Bcast(data.data(), static_cast<int>(data.size()), datatype<T>(), root, comm_));
    if (rank_ == root)
        charge(p, static_cast<std::uint64_t>(size_ - 1) * data.size_bytes(), 0);
    else
        charge(p, 0, data.size_bytes());
}

template <typename T>
std::vector<T> communicator::allgather(T value, purpose p) const
{
    std::vector<T> out(static_cast<std::size_t>(size_));
    RETEXO_CHECK_MPI(MPI_Allgather(&value, 1, datatype<T>(), out.data(), 1, datatype<T>(), comm_));
    charge(p, static_cast<std::uint64_t>(size_ - 1) * sizeof(T), static_cast<std::uint64_t>(size_ - 1) * sizeof(T));
    return out;
}

template <typename T>
std::vector<T> communicator::allgatherv(std::span<const T> mine, purpose p) const
{
    RETEXO_ENSURE(mine.size() <= static_cast<std::size_t>(INT32_MAX),
                  "retexo::mpi::allgatherv: " << mine.size() << " elements exceed an int count");
    const int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(size_));
    RETEXO_CHECK_MPI(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_));
    std::vector<int> displs(static_cast<std::size_t>(size_), 0);
    std::int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
        RETEXO_ENSURE(total <= INT32_MAX, "retexo::mpi::allgatherv: total exceeds an int count");
        displs[r] = static_cast<int>(total);
        total += counts[r];
    }
    RETEXO_ENSURE(total <= INT32_MAX, "retexo::mpi::allgatherv: total exceeds an int count");
    std::vector<T> out(static_cast<std::size_t>(total));
    RETEXO_CHECK_MPI(
        MPI_Allgatherv(mine.data(), n, datatype<T>(), out.data(), counts.data(), displs.data(), datatype<T>(), comm_));
    charge(p, static_cast<std::uint64_t>(size_ - 1) * (mine.size_bytes() + sizeof(int)),
           static_cast<std::uint64_t>(total - n) * sizeof(T) + (size_ - 1) * sizeof(int));
    return out;
}

template <typename T>
void communicator::alltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                             const int* recv_counts, const int* recv_displs, purpose p) const
{
    RETEXO_CHECK_MPI(MPI_Alltoallv(send, send_counts, send_displs, datatype<T>(), recv, recv_counts, recv_displs,
                                   datatype<T>(), comm_));
    std::uint64_t out = 0, in = 0, msgs = 0;
    for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        out += static_cast<std::uint64_t>(send_counts[r]) * sizeof(T);
        in += static_cast<std::uint64_t>(recv_counts[r]) * sizeof(T);
        msgs += send_counts[r] > 0 ? 1 : 0;
    }
    charge(p, out, in, msgs);
}

template <typename T>
std::vector<T> communicator::exchange(std::span<const T> send, std::span<const std::int64_t> send_offsets, purpose p,
                                      std::vector<std::int64_t>* received_from) const
{
    RETEXO_ENSURE(static_cast<int>(send_offsets.size()) == size_ + 1 && send_offsets.front() == 0 &&
                      send_offsets.back() == static_cast<std::int64_t>(send.size()),
                  "retexo::mpi::exchange: " << send_offsets.size() << " offsets for " << size_ << " ranks and "
                                            << send.size() << " elements");
    std::vector<int> send_counts(static_cast<std::size_t>(size_)), send_displs(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
        RETEXO_ENSURE(send_offsets[r + 1] <= INT32_MAX, "retexo::mpi::exchange: offsets exceed an int count");
        send_displs[r] = static_cast<int>(send_offsets[r]);
        send_counts[r] = static_cast<int>(send_offsets[r + 1] - send_offsets[r]);
    }
    const auto recv_counts = alltoall(send_counts, p);
    std::vector<int> recv_displs(static_cast<std::size_t>(size_));
    std::vector<std::int64_t> from(static_cast<std::size_t>(size_) + 1, 0);
    for (int r = 0; r < size_; ++r) {
        from[r + 1] = from[r] + recv_counts[r];
        RETEXO_ENSURE(from[r + 1] <= INT32_MAX,
                      "retexo::mpi::exchange: " << from[r + 1] << " elements to receive exceed an int count");
        recv_displs[r] = static_cast<int>(from[r]);
    }
    std::vector<T> out(static_cast<std::size_t>(from.back()));
    alltoallv(send.data(), send_counts.data(), send_displs.data(), out.data(), recv_counts.data(), recv_displs.data(),
              p);
    if (received_from != nullptr) *received_from = std::move(from);
    return out;
}

} // namespace retexo::mpi
