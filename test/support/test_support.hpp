#pragma once
// Helpers shared by retexo's tests: temporary directories, gzip files, the shared datasets,
// small hand-made graphs.

#include <retexo/comm/communicator.hpp>
#include <retexo/graph/graph.hpp>

#include <catch2/catch.hpp>
#include <omp.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace retexo::test {

/// A fresh directory under the system temp dir, removed with its contents on destruction.
class temp_dir {
public:
    temp_dir();
    explicit temp_dir(std::string path) : path_(std::move(path)), owner_(false) {}
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir();
    const std::string& path() const noexcept { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
    bool owner_ = true;
};

/// A temp dir made by rank 0 and shared with all ranks (collective; removed by rank 0).
struct shared_temp_dir {
    std::unique_ptr<temp_dir> owner;
    std::string path;
    explicit shared_temp_dir(const mpi::communicator& comm)
    {
        if (comm.rank() == 0) {
            owner = std::make_unique<temp_dir>();
            path = owner->path();
        }
        comm.broadcast(path, 0, purpose::control);
    }
    std::string operator/(const std::string& n) const { return path + "/" + n; }
};

/// Write text to a file, gzip-compressed when the name ends in .gz.
void write_file(const std::string& path, const std::string& text);

/// The shared dataset directory for `name`, or nullopt (tests then skip).
std::optional<std::string> dataset_dir(const std::string& name);

/// Directory of the built command-line tools.
std::string apps_dir();

/// f(t) with OpenMP at t = 1, 2 and 3 threads, the thread count restored after.
template <typename F>
void at_thread_counts(F&& f)
{
    const int keep = omp_get_max_threads();
    for (int t : {1, 2, 3}) {
        omp_set_num_threads(t);
        f(t);
    }
    omp_set_num_threads(keep);
}

/// A small undirected graph from an edge list, with features, labels and a split.
graph make_graph(node_t n, const std::vector<std::pair<node_t, node_t>>& undirected_edges, int features, int classes,
                 std::uint64_t seed = 1);

/// Write an OGB raw layout directory for g (undirected edges u<v once).
/// g with most feature entries zeroed (about `density` of them kept, each node keeps at least
/// one), stored as sparse rows.  Its dense twin: the same values in a dense matrix.
graph with_sparse_features(graph g, double density, std::uint64_t seed = 17);
graph dense_twin(graph g);

void write_ogb_dir(const graph& g, const std::string& dir, const std::string& split = "s");

} // namespace retexo::test

/// Skip the rest of a test case, printing a line ctest recognises as a skip.
#define RETEXO_SKIP(msg)                                                                                               \
    do {                                                                                                               \
        WARN("SKIPPED: " << msg);                                                                                      \
        return;                                                                                                        \
    } while (false)

/// Bind `var` to the shared dataset directory or skip the test.
#define RETEXO_REQUIRE_DATASET(var, name)                                                                              \
    const auto var##_opt = ::retexo::test::dataset_dir(name);                                                          \
    if (!var##_opt) RETEXO_SKIP("dataset " << name << " not found under " RETEXO_DATASETS_DIR);                        \
    const std::string& var = *var##_opt
