// What retexo_mpi writes: model files and every node's predictions, gathered by id.
#include <retexo/core/atomic_file.hpp>
#include <retexo/io/hdf5.hpp>
#include <retexo/io/outputs.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unistd.h>

namespace retexo {

void save_model(const std::string& path, const std::vector<named_tensor>& tensors,
                const std::vector<std::pair<std::string, std::string>>& attributes)
{
    atomic_file out(path);
    {
        auto f = h5::file::create(out.temp_path(), path);
        f.set_attr("retexo_format", std::string("retexo-model"));
        f.set_attr("format_version", std::int64_t{1});
        for (const auto& [k, v] : attributes)
            f.set_attr(k, v);
        for (const auto& t : tensors)
            f.write_matrix("parameters/" + t.name, t.value);
        f.close();
    }
    out.commit();
}

std::vector<named_tensor> load_model(const std::string& path)
{
    const auto f = h5::file::open(path);
    RETEXO_ENSURE(f.has_attr("retexo_format") && f.attr_string("retexo_format") == "retexo-model",
                  path << ": not a retexo model file");
    std::vector<named_tensor> out;
    h5::handle g(H5Gopen2(f.id(), "parameters", H5P_DEFAULT), H5Gclose);
    RETEXO_ENSURE(g.valid(), path << ": group parameters is missing");
    hsize_t n = 0;
    H5Gget_num_objs(g.get(), &n);
    for (hsize_t i = 0; i < n; ++i) {
        char name[1024];
        H5Gget_objname_by_idx(g.get(), i, name, sizeof name);
        out.push_back({name, f.read_matrix<float>(std::string("parameters/") + name)});
    }
    return out;
}

namespace {

/// A rank's contiguous block of the global node ids [begin, begin + rows), with their
/// logits, embeddings and predicted classes.
struct prediction_block {
    node_t begin = 0, rows = 0;
    matrix_f logits, embedding;
    std::vector<std::int32_t> pred;
};

/// Every rank's owned rows moved to the rank whose block of ids (N * r / P onwards) holds
/// them (collective).
prediction_block gather_block(const mpi::communicator& comm, const local_partition& part, const matrix_f& logits,
                              const matrix_f& embedding)
{
    const node_t own = part.num_owned();
    const int P = comm.size();
    const std::int64_t N = part.global.num_nodes;
    const int C = static_cast<int>(logits.cols()), E = static_cast<int>(embedding.cols()), W = C + E;
    auto block_start = [&](int r) { return static_cast<node_t>(N * r / P); };
    auto block_of = [&](node_t g) {
        int r = static_cast<int>(static_cast<std::int64_t>(g) * P / N);
        while (r + 1 < P && g >= block_start(r + 1))
            ++r;
        while (r > 0 && g < block_start(r))
            --r;
        return r;
    };
    std::vector<int> scount(static_cast<std::size_t>(P), 0), sdispl(static_cast<std::size_t>(P), 0);
    for (node_t g : part.owned_global)
        ++scount[block_of(g)];
    for (int q = 1; q < P; ++q)
        sdispl[q] = sdispl[q - 1] + scount[q - 1];
    std::vector<node_t> send_ids(static_cast<std::size_t>(own));
    std::vector<float> send_rows(static_cast<std::size_t>(own) * W);
    {
        auto fill = sdispl;
        for (node_t i = 0; i < own; ++i) {
            const int slot = fill[block_of(part.owned_global[i])]++;
            send_ids[slot] = part.owned_global[i];
            std::copy_n(logits.row(i).data(), C, send_rows.data() + static_cast<std::ptrdiff_t>(slot) * W);
            std::copy_n(embedding.row(i).data(), E, send_rows.data() + static_cast<std::ptrdiff_t>(slot) * W + C);
        }
    }
    const auto rcount = comm.alltoall(scount, purpose::output);
    std::vector<int> rdispl(static_cast<std::size_t>(P), 0);
    for (int q = 1; q < P; ++q)
        rdispl[q] = rdispl[q - 1] + rcount[q - 1];
    const int nrecv = rdispl[P - 1] + rcount[P - 1];
    std::vector<node_t> recv_ids(static_cast<std::size_t>(nrecv));
    comm.alltoallv(send_ids.data(), scount.data(), sdispl.data(), recv_ids.data(), rcount.data(), rdispl.data(),
                   purpose::output);
    std::vector<int> sc(scount), sd(sdispl), rc(rcount), rd(rdispl);
    for (int q = 0; q < P; ++q) {
        sc[q] *= W;
        sd[q] *= W;
        rc[q] *= W;
        rd[q] *= W;
    }
    std::vector<float> recv_rows(static_cast<std::size_t>(nrecv) * W);
    comm.alltoallv(send_rows.data(), sc.data(), sd.data(), recv_rows.data(), rc.data(), rd.data(), purpose::output);
    prediction_block b;
    b.begin = block_start(comm.rank());
    b.rows = block_start(comm.rank() + 1) - b.begin;
    b.logits.resize(b.rows, C);
    b.embedding.resize(b.rows, E);
    b.pred.resize(static_cast<std::size_t>(b.rows));
    for (int i = 0; i < nrecv; ++i) {
        const node_t r = recv_ids[i] - b.begin;
        const float* row = recv_rows.data() + static_cast<std::ptrdiff_t>(i) * W;
        std::copy_n(row, C, b.logits.row(r).data());
        std::copy_n(row + C, E, b.embedding.row(r).data());
        b.pred[r] = static_cast<std::int32_t>(std::max_element(row, row + C) - row);
    }
    return b;
}

/// This rank's block into the parallel HDF5 file of N rows, closing it (collective).  Every
/// rank makes every collective call, also after one of its writes failed (a full disk), or
/// the others would wait in it: the first error is returned, for the ranks to agree on.
std::string write_block_file(h5::file& f, std::int64_t N, const prediction_block& b)
{
    const auto C = static_cast<hsize_t>(b.logits.cols()), E = static_cast<hsize_t>(b.embedding.cols());
    f.set_attr("retexo_format", std::string("retexo-predictions"));
    f.set_attr("num_nodes", static_cast<std::int64_t>(N));
    const hsize_t d1[1] = {static_cast<hsize_t>(N)};
    const hsize_t dc[2] = {static_cast<hsize_t>(N), C};
    const hsize_t de[2] = {static_cast<hsize_t>(N), E};
    auto pred = f.create_dataset<std::int32_t>("prediction", d1);
    auto lg = f.create_dataset<float>("logits", dc);
    auto em = f.create_dataset<float>("embedding", de);
    h5::handle xfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    H5Pset_dxpl_mpio(xfer.get(), H5FD_MPIO_COLLECTIVE);
    const auto b0 = static_cast<hsize_t>(b.begin), bn = static_cast<hsize_t>(b.rows);
    std::string err;
    auto keep_first = [&](auto&& step) {
        try {
            step();
        } catch (const std::exception& e) {
            if (err.empty()) err = e.what();
        }
    };
    keep_first([&] { f.write_rows<std::int32_t>(pred, "prediction", b0, bn, 1, b.pred.data(), xfer.get()); });
    keep_first([&] { f.write_rows<float>(lg, "logits", b0, bn, C, b.logits.data(), xfer.get()); });
    keep_first([&] { f.write_rows<float>(em, "embedding", b0, bn, E, b.embedding.data(), xfer.get()); });
    pred.reset();
    lg.reset();
    em.reset();
    keep_first([&] { f.close(); });
    return err;
}

/// Read this rank's rows back: MPI-IO can lose writes to a full disk without an error.
void check_block_file(const std::string& temp, const std::string& path, const prediction_block& b)
{
    const auto f = h5::file::open(temp);
    const auto b0 = static_cast<hsize_t>(b.begin), bn = static_cast<hsize_t>(b.rows);
    auto same = [&]<typename T>(const std::string& name, const T* written, hsize_t cols) {
        std::vector<T> back(static_cast<std::size_t>(bn * cols));
        f.read_rows<T>(f.open_dataset(name), name, b0, bn, cols, back.data());
        RETEXO_ENSURE(std::memcmp(back.data(), written, back.size() * sizeof(T)) == 0, // bits, NaN too
                      path << ": " << name << " rows " << b0 << ".." << b0 + bn
                           << " did not reach the disk (no space left on the device?)");
    };
    same("prediction", b.pred.data(), 1);
    same("logits", b.logits.data(), static_cast<hsize_t>(b.logits.cols()));
    same("embedding", b.embedding.data(), static_cast<hsize_t>(b.embedding.cols()));
}

} // namespace

void write_predictions(const mpi::communicator& comm, const std::string& path, const local_partition& part,
                       const matrix_f& logits, const matrix_f& embedding)
{
    RETEXO_ENSURE(logits.rows() == part.num_owned() && embedding.rows() == part.num_owned(),
                  "retexo::write_predictions: need one logits and embedding row per owned node");
    const prediction_block block = gather_block(comm, part, logits, embedding);

    // One parallel HDF5 file, written under a temporary name and renamed by rank 0.
    std::string temp = path + ".tmp." + std::to_string(::getpid());
    comm.broadcast(temp, 0, purpose::output);
    // Rank 0 removes the temporary file unless it was moved into place, also on an error (the
    // file is closed first: f is destroyed before the guard).
    struct remove_unless_moved {
        const std::string& temp;
        bool root, moved = false;
        ~remove_unless_moved()
        {
            if (root && !moved) std::remove(temp.c_str());
        }
    } cleanup{temp, comm.rank() == 0};
    std::string err;
    std::optional<h5::file> f;
    try {
        f.emplace(h5::file::create_parallel(temp, comm.get(), path));
    } catch (const std::exception& e) {
        err = e.what();
    }
    comm.agree(err);
    try {
        // Closes it before the rename; throws only from making the datasets (collective).
        err = write_block_file(*f, part.global.num_nodes, block);
    } catch (const std::exception& e) {
        err = e.what();
    }
    comm.agree(err);
    try {
        check_block_file(temp, path, block);
    } catch (const std::exception& e) {
        err = e.what();
    }
    comm.agree(err);
    if (cleanup.root) {
        cleanup.moved = std::rename(temp.c_str(), path.c_str()) == 0;
        if (!cleanup.moved) err = path + ": cannot move the predictions into place: " + std::strerror(errno);
    }
    comm.agree(err);
}

} // namespace retexo
