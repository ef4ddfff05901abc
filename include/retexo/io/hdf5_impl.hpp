#pragma once
// Template bodies of hdf5.hpp, which includes this file at its end: include hdf5.hpp, not this.

#include <cstdint>
#include <type_traits>

namespace retexo::h5 {

template <typename T>
hid_t native_type()
{
    if constexpr (std::is_same_v<T, float>)
        return H5T_NATIVE_FLOAT;
    else if constexpr (std::is_same_v<T, double>)
        return H5T_NATIVE_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int8_t>)
        return H5T_NATIVE_INT8;
    else if constexpr (std::is_same_v<T, std::uint8_t>)
        return H5T_NATIVE_UINT8;
    else if constexpr (std::is_same_v<T, std::uint16_t>)
        return H5T_NATIVE_UINT16;
    else if constexpr (std::is_same_v<T, std::int32_t>)
        return H5T_NATIVE_INT32;
    else if constexpr (std::is_same_v<T, std::int64_t>)
        return H5T_NATIVE_INT64;
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        return H5T_NATIVE_UINT64;
    else
        static_assert(sizeof(T) == 0, "retexo::h5::native_type: unsupported element type");
}

template <typename T>
handle file::create_dataset(const std::string& name, std::span<const hsize_t> dims, hsize_t chunk_rows)
{
    make_groups(name);
    handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    RETEXO_ENSURE(space.valid(), display_ << ": cannot create dataspace for " << name);
    handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(dcpl.get(), false); // no timestamps: the same content gives the same file
    hsize_t row_values = 1;
    for (std::size_t d = 1; d < dims.size(); ++d)
        row_values *= dims[d];
    // A parallel file's datasets stay contiguous unless asked (HDF5 1.10 writes filtered
    // chunks only collectively); every other non-empty dataset is chunked with a checksum.
    const bool chunked = !dims.empty() && dims[0] > 0 && row_values > 0 && (chunk_rows > 0 || !parallel_);
    if (chunked) {
        std::vector<hsize_t> chunk(dims.begin(), dims.end());
        chunk[0] = std::min<hsize_t>(chunk_rows > 0 ? chunk_rows : chunk_rows_for(row_values, sizeof(T)), dims[0]);
        H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
        if (!parallel_) H5Pset_fletcher32(dcpl.get());
    }
    handle ds(H5Dcreate2(h_.get(), name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    RETEXO_ENSURE(ds.valid(), display_ << ": cannot create dataset " << name);
    return ds;
}

template <typename T>
handle file::create_growing(const std::string& name, hsize_t chunk)
{
    make_groups(name);
    const hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunks[1] = {chunk > 0 ? chunk : 1};
    handle space(H5Screate_simple(1, dims, maxdims), H5Sclose);
    handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(dcpl.get(), false);
    H5Pset_chunk(dcpl.get(), 1, chunks);
    if (!parallel_) H5Pset_fletcher32(dcpl.get());
    handle ds(H5Dcreate2(h_.get(), name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    RETEXO_ENSURE(ds.valid(), display_ << ": cannot create dataset " << name);
    return ds;
}

template <typename T>
void file::append(const handle& dataset, const std::string& name, hsize_t at, std::span<const T> values) const
{
    if (values.empty()) return;
    const hsize_t size[1] = {at + values.size()};
    RETEXO_ENSURE(H5Dset_extent(dataset.get(), size) >= 0, display_ << ": cannot extend " << name);
    write_rows<T>(dataset, name, at, values.size(), 1, values.data());
}

template <typename T>
void file::write_rows(const handle& dataset, const std::string& name, hsize_t row0, hsize_t rows, hsize_t cols,
                      const T* data, hid_t xfer) const
{
    handle fspace(H5Dget_space(dataset.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(fspace.get());
    hsize_t start[2] = {row0, 0};
    hsize_t count[2] = {rows, cols};
    if (rows == 0)
        H5Sselect_none(fspace.get());
    else
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
    hsize_t mdims[2] = {rows, cols};
    handle mspace(H5Screate_simple(rank, mdims, nullptr), H5Sclose);
    if (rows == 0) H5Sselect_none(mspace.get());
    RETEXO_ENSURE(H5Dwrite(dataset.get(), native_type<T>(), mspace.get(), fspace.get(), xfer, data) >= 0,
                  display_ << ": write of " << name << " rows " << row0 << ".." << row0 + rows << " failed");
}

template <typename T>
void file::read_rows(const handle& dataset, const std::string& name, hsize_t row0, hsize_t rows, hsize_t cols,
                     T* out) const
{
    handle fspace(H5Dget_space(dataset.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(fspace.get());
    hsize_t start[2] = {row0, 0};
    hsize_t count[2] = {rows, cols};
    RETEXO_ENSURE(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0,
                  display_ << ": rows " << row0 << ".." << row0 + rows << " of " << name << " are out of range");
    hsize_t mdims[2] = {rows, cols};
    handle mspace(H5Screate_simple(rank, mdims, nullptr), H5Sclose);
    RETEXO_ENSURE(H5Dread(dataset.get(), native_type<T>(), mspace.get(), fspace.get(), H5P_DEFAULT, out) >= 0,
                  display_ << ": reading " << name << " rows " << row0 << ".." << row0 + rows << " failed ("
                           << error_detail() << "; truncated or corrupt file?)");
}

template <typename T>
void file::write(const std::string& name, std::span<const T> data, std::vector<hsize_t> dims)
{
    if (dims.empty()) dims.push_back(data.size());
    hsize_t total = 1;
    for (auto d : dims)
        total *= d;
    RETEXO_ENSURE(total == data.size(), display_ << ": dataset " << name << " given " << data.size() << " values for "
                                                 << total << " elements");
    auto ds = create_dataset<T>(name, dims);
    const hsize_t cols = dims.size() > 1 ? dims[1] : 1;
    write_rows<T>(ds, name, 0, dims[0], cols, data.data());
}

template <typename T>
std::vector<T> file::read_vector(const std::string& name, std::int64_t expected_len) const
{
    const auto d = dims(name);
    RETEXO_ENSURE(d.size() == 1, display_ << ": dataset " << name << " must be 1-D, has " << d.size() << " dimensions");
    RETEXO_ENSURE(expected_len < 0 || static_cast<std::int64_t>(d[0]) == expected_len,
                  display_ << ": dataset " << name << " has " << d[0] << " entries, expected " << expected_len);
    std::vector<T> out(d[0]);
    if (!out.empty()) read_rows<T>(open_dataset(name), name, 0, d[0], 1, out.data());
    return out;
}

template <typename T>
void file::write_matrix(const std::string& name, const matrix<T>& m)
{
    write<T>(name, std::span<const T>(m.data(), static_cast<std::size_t>(m.size())),
             {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())});
}

template <typename T>
matrix<T> file::read_matrix(const std::string& name, std::int64_t expected_cols) const
{
    const auto d = dims(name);
    RETEXO_ENSURE(d.size() == 2, display_ << ": dataset " << name << " must be 2-D, has " << d.size() << " dimensions");
    RETEXO_ENSURE(expected_cols < 0 || static_cast<std::int64_t>(d[1]) == expected_cols,
                  display_ << ": dataset " << name << " has " << d[1] << " columns, expected " << expected_cols);
    matrix<T> m(static_cast<Eigen::Index>(d[0]), static_cast<Eigen::Index>(d[1]));
    if (m.size() > 0) read_rows<T>(open_dataset(name), name, 0, d[0], d[1], m.data());
    return m;
}

} // namespace retexo::h5
