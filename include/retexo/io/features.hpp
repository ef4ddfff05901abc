#pragma once
/// @file features.hpp
/// Node features in HDF5 files (graph files, partition files, checkpoints): dense, a float32
/// dataset BASE [rows, cols]; sparse, the group BASE_csr holding shape (int64 [rows, cols]),
/// offsets (int64, rows + 1), indices (int32, column ids ascending per row) and values
/// (float32).  Written and read in
/// blocks of rows, so converters and partitioners never hold every row.

#include <retexo/core/names.hpp>
#include <retexo/core/sparse.hpp>
#include <retexo/io/hdf5.hpp>

#include <span>
#include <string>

namespace retexo {

enum class feature_storage { dense, sparse };
constexpr name_table<feature_storage, 2> names_of(feature_storage)
{
    return {"feature storage", {{{feature_storage::dense, "dense"}, {feature_storage::sparse, "sparse"}}}};
}

/// Sparse below sparse_density_limit, else dense.
feature_storage storage_for(double density) noexcept;

/// Writes rows [0, rows) in order, block by block, in the given storage (blocks of either
/// kind are converted).  finish() checks that every row came.
class feature_writer {
public:
    feature_writer(h5::file& f, std::string base, std::int64_t rows, std::int64_t cols, feature_storage storage);
    void append(const node_features& block);
    void finish();

private:
    h5::file& f_;
    std::string base_;
    std::int64_t rows_, cols_;
    feature_storage storage_;
    std::int64_t written_ = 0;
    h5::handle dense_, indices_, values_;
    std::vector<offset_t> offsets_{0};
};

/// How feature_reader's errors name a row: `noun` and the row's index in the dataset, or
/// ids[index] where ids are given (the global ids of a part file's rows); e.g. "node 7".
struct feature_row_names {
    std::string noun = "row";
    std::span<const node_t> ids = {};
};

/// Reads rows of what feature_writer wrote (the storage is found in the file); checks the
/// shapes when opened, and when read every sparse block's structure and that every value
/// is finite.
class feature_reader {
public:
    /// `names` (its ids, if any) must outlive the reader.
    feature_reader(const h5::file& f, std::string base, std::int64_t rows, std::int64_t cols,
                   feature_row_names names = {});
    feature_storage storage() const noexcept { return storage_; }
    /// Rows [row0, row0 + n).
    node_features read(std::int64_t row0, std::int64_t n) const;
    /// Every row.
    node_features read_all() const { return read(0, rows_); }

private:
    const h5::file& f_;
    std::string base_;
    std::int64_t rows_, cols_;
    feature_row_names names_;
    std::string row_name(std::int64_t row) const;
    feature_storage storage_;
    h5::handle dense_;
};

/// Whole features at once (checkpoints); column blocks as BASE_block0, BASE_block1, ...
void write_features(h5::file& f, const std::string& base, const node_features& x);
node_features read_features(const h5::file& f, const std::string& base);

} // namespace retexo
