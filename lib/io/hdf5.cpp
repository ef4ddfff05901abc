#include <retexo/io/hdf5.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

namespace retexo::h5 {

void silence_errors()
{
    static std::once_flag once;
    std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

file file::open(const std::string& path, bool writable)
{
    silence_errors();
    {
        std::ifstream probe(path, std::ios::binary);
        RETEXO_ENSURE(probe.good(), path << ": cannot open: " << std::strerror(errno));
    }
    RETEXO_ENSURE(H5Fis_hdf5(path.c_str()) > 0, path << ": not an HDF5 file");
    handle h(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    RETEXO_ENSURE(h.valid(), path << ": cannot open as HDF5 (truncated or corrupt file?)");
    return {std::move(h), path};
}

namespace {
/// File access properties of every file retexo writes: the 1.10 format, whose superblock,
/// object headers and chunk indexes carry checksums, so HDF5 rejects a corrupted file
/// instead of reading garbage metadata (fuzzing found heap overflows inside HDF5 1.10.8 when
/// it read corrupted files of the older formats).
handle writer_fapl()
{
    handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    return fapl;
}
/// No timestamps on the root group either: the same content gives the same file.
handle writer_fcpl()
{
    handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    H5Pset_obj_track_times(fcpl.get(), false);
    return fcpl;
}
} // namespace

file file::create(const std::string& path, const std::string& display_path)
{
    silence_errors();
    const std::string shown = display_path.empty() ? path : display_path;
    const handle fapl = writer_fapl();
    handle h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, writer_fcpl().get(), fapl.get()), H5Fclose);
    RETEXO_ENSURE(h.valid(), shown << ": cannot create HDF5 file (directory missing or not writable?)");
    return {std::move(h), shown};
}

file file::create_parallel(const std::string& path, MPI_Comm comm, const std::string& display_path)
{
    silence_errors();
    const std::string shown = display_path.empty() ? path : display_path;
    const handle fapl = writer_fapl();
    H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
    handle h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, writer_fcpl().get(), fapl.get()), H5Fclose);
    RETEXO_ENSURE(h.valid(), shown << ": cannot create parallel HDF5 file");
    return {std::move(h), shown};
}

bool file::exists(const std::string& object) const
{
    // Check each path component, as H5Lexists requires.
    std::size_t pos = 0;
    while (true) {
        pos = object.find('/', pos + 1);
        const std::string prefix = object.substr(0, pos);
        if (H5Lexists(h_.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
        if (pos == std::string::npos) return true;
    }
}

handle file::open_dataset(const std::string& dataset) const
{
    RETEXO_ENSURE(exists(dataset),
                  display_ << ": dataset " << dataset << " is missing (wrong layout or not a retexo file?)");
    handle ds(H5Dopen2(h_.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
    RETEXO_ENSURE(ds.valid(), display_ << ": cannot open dataset " << dataset);
    return ds;
}

std::vector<hsize_t> file::dims(const std::string& dataset) const
{
    const auto ds = open_dataset(dataset);
    handle space(H5Dget_space(ds.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    RETEXO_ENSURE(rank >= 0, display_ << ": cannot read the shape of " << dataset);
    std::vector<hsize_t> d(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
    return d;
}

void file::make_groups(const std::string& object)
{
    std::size_t pos = 0;
    while ((pos = object.find('/', pos + 1)) != std::string::npos) {
        const std::string group = object.substr(0, pos);
        if (H5Lexists(h_.get(), group.c_str(), H5P_DEFAULT) > 0) continue;
        handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
        H5Pset_obj_track_times(gcpl.get(), false);
        handle g(H5Gcreate2(h_.get(), group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
        RETEXO_ENSURE(g.valid(), display_ << ": cannot create group " << group);
    }
}

namespace {
void write_attr(hid_t loc, const std::string& display, const std::string& name, hid_t type, const void* value)
{
    if (H5Aexists(loc, name.c_str()) > 0) H5Adelete(loc, name.c_str());
    handle space(H5Screate(H5S_SCALAR), H5Sclose);
    handle attr(H5Acreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    RETEXO_ENSURE(attr.valid() && H5Awrite(attr.get(), type, value) >= 0,
                  display << ": cannot write attribute " << name);
}

handle open_attr(hid_t loc, const std::string& display, const std::string& name)
{
    RETEXO_ENSURE(H5Aexists(loc, name.c_str()) > 0,
                  display << ": attribute " << name << " is missing (not a retexo file?)");
    handle attr(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose);
    RETEXO_ENSURE(attr.valid(), display << ": cannot open attribute " << name);
    return attr;
}
} // namespace

void file::set_attr(const std::string& name, const std::string& value)
{
    handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), std::max<std::size_t>(1, value.size()));
    H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
    write_attr(h_.get(), display_, name, type.get(), value.empty() ? "" : value.data());
}

void file::set_attr(const std::string& name, std::int64_t value)
{
    write_attr(h_.get(), display_, name, H5T_NATIVE_INT64, &value);
}

void file::set_attr(const std::string& name, double value)
{
    write_attr(h_.get(), display_, name, H5T_NATIVE_DOUBLE, &value);
}

bool file::has_attr(const std::string& name) const
{
    return H5Aexists(h_.get(), name.c_str()) > 0;
}

std::string file::attr_string(const std::string& name) const
{
    const auto attr = open_attr(h_.get(), display_, name);
    handle type(H5Aget_type(attr.get()), H5Tclose);
    RETEXO_ENSURE(H5Tget_class(type.get()) == H5T_STRING, display_ << ": attribute " << name << " is not a string");
    RETEXO_ENSURE(H5Tis_variable_str(type.get()) <= 0,
                  display_ << ": attribute " << name << " is a variable-length string");
    const std::size_t size = H5Tget_size(type.get());
    std::string value(size, '\0');
    handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), size);
    H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
    RETEXO_ENSURE(H5Aread(attr.get(), mem.get(), value.data()) >= 0, display_ << ": cannot read attribute " << name);
    value.resize(std::strlen(value.c_str()));
    return value;
}

std::int64_t file::attr_int(const std::string& name) const
{
    const auto attr = open_attr(h_.get(), display_, name);
    std::int64_t value = 0;
    RETEXO_ENSURE(H5Aread(attr.get(), H5T_NATIVE_INT64, &value) >= 0,
                  display_ << ": cannot read attribute " << name << " as an integer");
    return value;
}

double file::attr_double(const std::string& name) const
{
    const auto attr = open_attr(h_.get(), display_, name);
    double value = 0;
    RETEXO_ENSURE(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value) >= 0,
                  display_ << ": cannot read attribute " << name << " as a number");
    return value;
}

} // namespace retexo::h5
