// The distributed directory of node owners: registration, lookups, and the assignment hash
// fed slice by slice.
#include <retexo/core/hash.hpp>
#include <retexo/ingest/directory.hpp>

#include <algorithm>
#include <sstream>

namespace retexo {

node_directory::node_directory(const mpi::communicator& comm, node_t num_nodes) : comm_(&comm), n_(num_nodes)
{
    const int p = comm.size();
    first_.resize(static_cast<std::size_t>(p) + 1);
    for (int r = 0; r < p; ++r)
        first_[r] = row_slice(num_nodes, r, p).first;
    first_[p] = num_nodes;
}

node_directory::node_directory(const mpi::communicator& comm, node_t num_nodes, std::span<const part_t> owner_of_slice)
    : node_directory(comm, num_nodes)
{
    const int me = comm.rank();
    std::ostringstream err;
    if (static_cast<node_t>(owner_of_slice.size()) != first_[me + 1] - first_[me])
        err << "retexo::node_directory: " << owner_of_slice.size() << " owners for a slice of "
            << first_[me + 1] - first_[me] << " ids";
    else
        for (std::size_t i = 0; i < owner_of_slice.size(); ++i)
            if (owner_of_slice[i] < 0 || owner_of_slice[i] >= comm.size()) {
                err << "node " << first_[me] + static_cast<node_t>(i) << " is assigned to partition "
                    << owner_of_slice[i] << ", outside [0, " << comm.size() << ")";
                break;
            }
    comm.agree(err.str(), purpose::setup);
    owner_.assign(owner_of_slice.begin(), owner_of_slice.end());
    value_.assign(owner_.size(), 0);
}

node_directory::node_directory(const mpi::communicator& comm, node_t num_nodes, std::span<const node_t> owned,
                               const std::string& who)
    : node_directory(comm, num_nodes)
{
    const int p = comm.size();
    const auto bad = std::find_if(owned.begin(), owned.end(), [&](node_t v) { return v < 0 || v >= num_nodes; });
    std::ostringstream err;
    if (bad != owned.end())
        err << who << ": node id " << *bad << " is outside [0, " << num_nodes << "): the owners hold " << num_nodes
            << " nodes in all, so their global ids must be 0.." << num_nodes - 1;
    comm.agree(err.str(), purpose::setup);

    const auto sent = send_to_keepers(owned);
    const auto& got = sent.received;
    const auto& from = sent.received_from;
    const int me = comm.rank();
    owner_.assign(static_cast<std::size_t>(first_[me + 1] - first_[me]), -1);
    value_.assign(owner_.size(), 0);
    for (int r = 0; r < p && err.str().empty(); ++r)
        for (auto i = from[r]; i < from[r + 1]; ++i) {
            auto& o = owner_[got[i] - first_[me]];
            if (o != -1) {
                err << "node " << got[i] << " is claimed twice: by rank " << o << (o == r ? " itself" : "")
                    << (o == r ? "" : " and by rank " + std::to_string(r))
                    << " (every node must belong to exactly one owner)";
                break;
            }
            o = static_cast<part_t>(r);
        }
    if (err.str().empty()) {
        const auto none = std::find(owner_.begin(), owner_.end(), -1);
        if (none != owner_.end())
            err << "node " << first_[me] + (none - owner_.begin())
                << " belongs to no owner (the owners' ids must be 0.." << num_nodes - 1 << ", each held once)";
    }
    comm.agree(err.str(), purpose::setup);
}

int node_directory::keeper(node_t v) const
{
    return static_cast<int>(std::upper_bound(first_.begin(), first_.end(), v) - first_.begin()) - 1;
}

node_directory::routed node_directory::send_to_keepers(std::span<const node_t> ids) const
{
    const int p = comm_->size();
    routed out;
    out.sent_offsets.assign(static_cast<std::size_t>(p) + 1, 0);
    std::vector<int> dest(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        dest[i] = keeper(ids[i]);
        ++out.sent_offsets[dest[i] + 1];
    }
    for (int r = 0; r < p; ++r)
        out.sent_offsets[r + 1] += out.sent_offsets[r];
    std::vector<node_t> send(ids.size());
    out.sent_order.resize(ids.size());
    auto next = out.sent_offsets;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto at = next[dest[i]]++;
        send[at] = ids[i];
        out.sent_order[at] = static_cast<std::int64_t>(i);
    }
    out.received = comm_->exchange<node_t>(send, out.sent_offsets, purpose::setup, &out.received_from);
    return out;
}

template <typename T>
std::vector<T> node_directory::lookup(std::span<const node_t> ids, const std::vector<T>& table) const
{
    const auto bad = std::find_if(ids.begin(), ids.end(), [&](node_t v) { return v < 0 || v >= n_; });
    std::ostringstream err;
    if (bad != ids.end()) err << "node id " << *bad << " is outside [0, " << n_ << "): no owner holds it";
    comm_->agree(err.str(), purpose::setup);
    const auto sent = send_to_keepers(ids);
    const node_t base = first_[comm_->rank()];
    std::vector<T> answers(sent.received.size());
    for (std::size_t i = 0; i < answers.size(); ++i)
        answers[i] = table[sent.received[i] - base];
    // The answers return to the askers in the order the questions came.
    const auto back = comm_->exchange<T>(answers, sent.received_from, purpose::setup);
    std::vector<T> out(ids.size());
    for (std::size_t k = 0; k < back.size(); ++k)
        out[sent.sent_order[k]] = back[k];
    return out;
}

std::vector<part_t> node_directory::owners(std::span<const node_t> ids) const
{
    return lookup(ids, owner_);
}

std::vector<offset_t> node_directory::values(std::span<const node_t> ids) const
{
    return lookup(ids, value_);
}

void node_directory::set_values(std::span<const node_t> owned, std::span<const offset_t> values)
{
    RETEXO_ENSURE(owned.size() == values.size(),
                  "retexo::node_directory::set_values: " << owned.size() << " ids, " << values.size() << " values");
    const auto sent = send_to_keepers(owned);
    std::vector<offset_t> in_order(values.size());
    for (std::size_t k = 0; k < in_order.size(); ++k)
        in_order[k] = values[sent.sent_order[k]];
    const auto received = comm_->exchange<offset_t>(in_order, sent.sent_offsets, purpose::setup);
    const node_t base = first_[comm_->rank()];
    for (std::size_t i = 0; i < received.size(); ++i)
        value_[sent.received[i] - base] = received[i];
}

std::uint64_t node_directory::assignment_hash() const
{
    // Seeded as retexo::assignment_hash is, then each rank feeds its slice in turn.
    fnv1a start;
    start.feed(static_cast<std::uint32_t>(comm_->size()));
    start.feed(static_cast<std::uint32_t>(n_));
    std::uint64_t h = start.value();
    for (int r = 0; r < comm_->size(); ++r) {
        if (r == comm_->rank()) {
            fnv1a f(h);
            for (part_t o : owner_)
                f.feed(static_cast<std::uint32_t>(o));
            h = f.value();
        }
        comm_->broadcast(std::span<std::uint64_t>(&h, 1), r, purpose::setup);
    }
    return h;
}

} // namespace retexo
