// Node features in HDF5 files, dense or CSR, read and written in row blocks.
#include <retexo/io/features.hpp>

#include <cmath>

namespace retexo {

namespace {

constexpr hsize_t growing_chunk = hsize_t{1} << 16;

std::string csr_group(const std::string& base)
{
    return base + "_csr";
}

/// Where write_features puts block i of column blocks.
std::string block_name(const std::string& base, int i)
{
    return base + "_block" + std::to_string(i);
}

/// Whether features are stored at base (dense or sparse).
bool stored(const h5::file& f, const std::string& base)
{
    return f.exists(base) || f.exists(csr_group(base));
}

} // namespace

feature_storage storage_for(double density) noexcept
{
    return density < sparse_density_limit ? feature_storage::sparse : feature_storage::dense;
}

feature_writer::feature_writer(h5::file& f, std::string base, std::int64_t rows, std::int64_t cols,
                               feature_storage storage)
    : f_(f), base_(std::move(base)), rows_(rows), cols_(cols), storage_(storage)
{
    if (storage_ == feature_storage::dense) {
        const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
        dense_ = f_.create_dataset<float>(base_, dims, h5::chunk_rows_for(static_cast<hsize_t>(cols)));
        return;
    }
    offsets_.reserve(static_cast<std::size_t>(rows) + 1);
    indices_ = f_.create_growing<std::int32_t>(csr_group(base_) + "/indices", growing_chunk);
    values_ = f_.create_growing<float>(csr_group(base_) + "/values", growing_chunk);
}

void feature_writer::append(const node_features& block)
{
    RETEXO_ENSURE(block.cols() == cols_,
                  f_.path() << ": " << base_ << ": a block of " << block.cols() << " columns, expected " << cols_);
    RETEXO_ENSURE(written_ + block.rows() <= rows_, f_.path() << ": " << base_ << ": more rows than " << rows_);
    if (storage_ == feature_storage::dense) {
        const matrix_f dense = block.is_sparse() ? block.sparse().to_dense() : matrix_f();
        const matrix_f& d = block.is_sparse() ? dense : block.dense();
        f_.write_rows<float>(dense_, base_, static_cast<hsize_t>(written_), static_cast<hsize_t>(d.rows()),
                             static_cast<hsize_t>(cols_), d.data());
    } else {
        const csr_matrix sparse = block.is_sparse() ? csr_matrix() : csr_matrix::from_dense(block.dense());
        const csr_matrix& s = block.is_sparse() ? block.sparse() : sparse;
        const auto at = static_cast<hsize_t>(offsets_.back());
        f_.append<std::int32_t>(indices_, csr_group(base_) + "/indices", at, s.indices);
        f_.append<float>(values_, csr_group(base_) + "/values", at, s.values);
        for (std::int64_t i = 0; i < s.rows; ++i)
            offsets_.push_back(offsets_.back() + s.row_nnz(i));
    }
    written_ += block.rows();
}

void feature_writer::finish()
{
    RETEXO_ENSURE(written_ == rows_,
                  f_.path() << ": " << base_ << ": " << written_ << " feature rows written, expected " << rows_);
    if (storage_ == feature_storage::sparse) {
        f_.write<offset_t>(csr_group(base_) + "/offsets", offsets_);
        f_.write<std::int64_t>(csr_group(base_) + "/shape", std::vector<std::int64_t>{rows_, cols_});
    }
    dense_.reset();
    indices_.reset();
    values_.reset();
}

feature_reader::feature_reader(const h5::file& f, std::string base, std::int64_t rows, std::int64_t cols,
                               feature_row_names names)
    : f_(f), base_(std::move(base)), rows_(rows), cols_(cols), names_(std::move(names)),
      storage_(f.exists(csr_group(base_)) ? feature_storage::sparse : feature_storage::dense)
{
    const auto& p = f_.path();
    if (storage_ == feature_storage::dense) {
        const auto d = f_.dims(base_);
        RETEXO_ENSURE(d.size() == 2 && d[0] == static_cast<hsize_t>(rows) && d[1] == static_cast<hsize_t>(cols),
                      p << ": dataset " << base_ << " must be " << rows << " x " << cols);
        dense_ = f_.open_dataset(base_);
        return;
    }
    const std::string g = csr_group(base_);
    const auto od = f_.dims(g + "/offsets");
    RETEXO_ENSURE(od.size() == 1 && od[0] == static_cast<hsize_t>(rows) + 1,
                  p << ": dataset " << g << "/offsets must have " << rows + 1 << " entries");
    const auto shape = f_.read_vector<std::int64_t>(g + "/shape", 2);
    RETEXO_ENSURE(shape[0] == rows && shape[1] == cols,
                  p << ": " << g << " is " << shape[0] << " x " << shape[1] << ", expected " << rows << " x " << cols);
    const auto id = f_.dims(g + "/indices");
    const auto vd = f_.dims(g + "/values");
    RETEXO_ENSURE(id.size() == 1 && vd.size() == 1 && id[0] == vd[0],
                  p << ": " << g << "/indices and " << g << "/values must be 1-D of one length");
}

std::string feature_reader::row_name(std::int64_t row) const
{
    const bool mapped = row >= 0 && row < static_cast<std::int64_t>(names_.ids.size());
    return names_.noun + " " + std::to_string(mapped ? static_cast<std::int64_t>(names_.ids[row]) : row);
}

node_features feature_reader::read(std::int64_t row0, std::int64_t n) const
{
    const auto& p = f_.path();
    RETEXO_ENSURE(row0 >= 0 && n >= 0 && row0 + n <= rows_,
                  p << ": feature rows [" << row0 << ", " << row0 + n << ") outside [0, " << rows_ << ")");
    if (storage_ == feature_storage::dense) {
        matrix_f x(n, cols_);
        if (x.size() > 0)
            f_.read_rows<float>(dense_, base_, static_cast<hsize_t>(row0), static_cast<hsize_t>(n),
                                static_cast<hsize_t>(cols_), x.data());
        // The first non-finite one, row-major: value k is row k / cols_, column k % cols_.
        if (!all_finite({x.data(), static_cast<std::size_t>(x.size())})) {
            const float* v = x.data();
            for (Eigen::Index k = 0; k < x.size(); ++k)
                if (!std::isfinite(v[k]))
                    RETEXO_THROW(p << ": " << base_ << ": " << row_name(row0 + k / cols_) << " has a non-finite value ("
                                   << v[k] << ") at column " << k % cols_);
        }
        return x;
    }
    const std::string g = csr_group(base_);
    csr_matrix s(n, cols_);
    f_.read_rows<offset_t>(f_.open_dataset(g + "/offsets"), g + "/offsets", static_cast<hsize_t>(row0),
                           static_cast<hsize_t>(n) + 1, 1, s.offsets.data());
    const offset_t e0 = s.offsets.front(), e1 = s.offsets.back();
    const auto total = static_cast<offset_t>(f_.dims(g + "/values")[0]);
    RETEXO_ENSURE(0 <= e0 && e0 <= e1 && e1 <= total, p << ": " << g << "/offsets of rows [" << row0 << ", " << row0 + n
                                                        << ") point outside the " << total << " stored entries");
    for (auto& o : s.offsets)
        o -= e0;
    s.indices.resize(static_cast<std::size_t>(e1 - e0));
    s.values.resize(s.indices.size());
    if (e1 > e0) {
        f_.read_rows<std::int32_t>(f_.open_dataset(g + "/indices"), g + "/indices", static_cast<hsize_t>(e0),
                                   static_cast<hsize_t>(e1 - e0), 1, s.indices.data());
        f_.read_rows<float>(f_.open_dataset(g + "/values"), g + "/values", static_cast<hsize_t>(e0),
                            static_cast<hsize_t>(e1 - e0), 1, s.values.data());
    }
    s.validate(p + ": " + g, [&](std::int64_t i) { return row_name(row0 + i); });
    return s;
}

void write_features(h5::file& f, const std::string& base, const node_features& x)
{
    if (x.is_blocks()) { // each block as itself: BASE_block0, BASE_block1, ...
        int i = 0;
        x.for_each_block([&](const auto& b, Eigen::Index) { write_features(f, block_name(base, i++), b); });
        return;
    }
    feature_writer w(f, base, x.rows(), x.cols(), x.is_sparse() ? feature_storage::sparse : feature_storage::dense);
    w.append(x);
    w.finish();
}

node_features read_features(const h5::file& f, const std::string& base)
{
    if (stored(f, block_name(base, 0))) {
        std::vector<column_blocks::block> blocks;
        Eigen::Index rows = -1;
        for (int i = 0; stored(f, block_name(base, i)); ++i) {
            node_features b = read_features(f, block_name(base, i));
            RETEXO_ENSURE(rows < 0 || b.rows() == rows, f.path() << ": " << block_name(base, i) << " has " << b.rows()
                                                                 << " rows, the blocks before it " << rows);
            rows = b.rows();
            if (b.is_sparse())
                blocks.emplace_back(std::move(b.sparse()));
            else
                blocks.emplace_back(std::move(b.dense()));
        }
        return from_blocks(std::move(blocks));
    }
    const std::string g = csr_group(base);
    std::int64_t rows = 0, cols = 0;
    if (f.exists(g)) {
        const auto shape = f.read_vector<std::int64_t>(g + "/shape", 2);
        rows = shape[0];
        cols = shape[1];
    } else {
        const auto d = f.dims(base);
        RETEXO_ENSURE(d.size() == 2, f.path() << ": dataset " << base << " must be 2-D");
        rows = static_cast<std::int64_t>(d[0]);
        cols = static_cast<std::int64_t>(d[1]);
    }
    return feature_reader(f, base, rows, cols).read_all();
}

} // namespace retexo
