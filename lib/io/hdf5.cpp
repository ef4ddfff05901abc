// Thin HDF5 wrappers: files (on disk or as in-memory images), datasets, attributes.
#include <retexo/io/hdf5.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

namespace retexo::h5 {

void silence_errors()
{
    static std::once_flag once;
    std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string error_detail()
{
    std::string first;
    const auto innermost = [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
        if (n == 0 && e->desc != nullptr) *static_cast<std::string*>(out) = e->desc;
        return 0;
    };
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &first);
    return first;
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
    close_failed = false;
    return {std::move(h), shown, path};
}

file::~file()
{
    if (!h_.valid()) return;
    if (!created_.empty() && (std::uncaught_exceptions() > 0 || close_failed)) {
        discard();
        close_failed = false;
    }
    h_.reset();
}

void file::discard() noexcept
{
    // Emptied before it closes, HDF5 finds room for what it still has to write (a close that
    // fails to write leaves HDF5 1.10.8 to crash when it terminates).
    [[maybe_unused]] const int emptied = ::truncate(created_.c_str(), 0); // else closed as it is
    // Another process writing to the same device (the other ranks' checkpoints) may take the
    // room freed meanwhile; it fails too and empties its file: wait a little for room.
    constexpr unsigned long long close_room = 64ULL << 10;
    auto room = [&] {
        struct statvfs fs {};
        return ::statvfs(created_.c_str(), &fs) != 0 ||
               static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize >= close_room;
    };
    for (int i = 0; i < 100 && !room(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    H5Fclose(h_.release());
}

void file::close()
{
    if (!h_.valid()) return;
    const bool failed = close_failed.exchange(false);
    bool closed = false;
    if (failed && !created_.empty())
        discard(); // emptied, then closed
    else
        closed = H5Fclose(h_.release()) >= 0; // a parallel file's close is collective: every rank makes it
    RETEXO_ENSURE(!failed && closed, display_ << ": cannot write all of the file (no space left on the device?)");
}

file file::create_parallel(const std::string& path, MPI_Comm comm, const std::string& display_path)
{
    silence_errors();
    const std::string shown = display_path.empty() ? path : display_path;
    const handle fapl = writer_fapl();
    H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
    handle h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, writer_fcpl().get(), fapl.get()), H5Fclose);
    RETEXO_ENSURE(h.valid(), shown << ": cannot create parallel HDF5 file");
    file f{std::move(h), shown};
    f.parallel_ = true;
    return f;
}

namespace {
/// A name no other open file has: HDF5 takes a core-driver file whose name is already open
/// for that file (and would read its bytes, not the image given).
std::string memory_file_name()
{
    static std::atomic<std::uint64_t> next{0};
    return "retexo-memory-file-" + std::to_string(next++);
}

/// File access properties `fapl` switched to a file held in memory (core driver, growing by
/// 64 KiB, no backing store).
handle memory_fapl(handle fapl)
{
    RETEXO_ENSURE(fapl.valid() && H5Pset_fapl_core(fapl.get(), std::size_t{64} << 10, false) >= 0,
                  "HDF5: cannot set up the core (in-memory) file driver");
    return fapl;
}

/// Where the superblock of a file image is, as H5Fis_hdf5 looks for its signature: at offset
/// 0, 512, 1024, 2048, ...; npos if nowhere.
std::size_t superblock_offset(std::span<const char> image)
{
    constexpr char signature[8] = {'\211', 'H', 'D', 'F', '\r', '\n', '\032', '\n'};
    for (std::size_t at = 0; at + sizeof signature <= image.size(); at = at == 0 ? 512 : 2 * at)
        if (std::memcmp(image.data() + at, signature, sizeof signature) == 0) return at;
    return std::string::npos;
}

/// Bob Jenkins' lookup3 hash (hashlittle, byte by byte), HDF5's metadata checksum.
std::uint32_t lookup3(const unsigned char* k, std::size_t length)
{
    auto rot = [](std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
    std::uint32_t a = 0xDEADBEEF + static_cast<std::uint32_t>(length), b = a, c = a;
    auto word = [&](std::size_t i, std::size_t n) {
        std::uint32_t w = 0;
        for (std::size_t j = 0; j < n; ++j)
            w |= static_cast<std::uint32_t>(k[i + j]) << (8 * j);
        return w;
    };
    for (; length > 12; length -= 12, k += 12) {
        a += word(0, 4);
        b += word(4, 4);
        c += word(8, 4);
        a -= c, a ^= rot(c, 4), c += b;
        b -= a, b ^= rot(a, 6), a += c;
        c -= b, c ^= rot(b, 8), b += a;
        a -= c, a ^= rot(c, 16), c += b;
        b -= a, b ^= rot(a, 19), a += c;
        c -= b, c ^= rot(b, 4), b += a;
    }
    if (length == 0) return c;
    a += word(0, std::min<std::size_t>(length, 4));
    if (length > 4) b += word(4, std::min<std::size_t>(length - 4, 4));
    if (length > 8) c += word(8, length - 8);
    c ^= b, c -= rot(b, 14);
    a ^= c, a -= rot(c, 11);
    b ^= a, b -= rot(a, 25);
    c ^= b, c -= rot(b, 16);
    a ^= c, a -= rot(c, 4);
    b ^= a, b -= rot(a, 14);
    c ^= b, c -= rot(b, 24);
    return c;
}

/// HDF5 1.10's H5Fget_file_image clears the superblock's file consistency flags in the image
/// (the file is open for writing) but leaves the superblock's checksum as it was (versions 2
/// and 3 carry one), so the image would not open: recompute the checksum.
void fix_superblock_checksum(std::span<char> image)
{
    const std::size_t at = superblock_offset(image);
    if (at == std::string::npos || image.size() - at < 12) return;
    const auto* sb = reinterpret_cast<const unsigned char*>(image.data() + at);
    if (sb[8] < 2) return;                                  // versions 0 and 1: no checksum
    const std::size_t length = 12 + 4 * std::size_t{sb[9]}; // signature .. root object header address
    if (image.size() - at < length + 4) return;
    const std::uint32_t sum = lookup3(sb, length);
    for (int j = 0; j < 4; ++j)
        image[at + length + static_cast<std::size_t>(j)] = static_cast<char>((sum >> (8 * j)) & 0xFF);
}
} // namespace

file file::open_image(std::span<const char> image, const std::string& display_path)
{
    silence_errors();
    RETEXO_ENSURE(superblock_offset(image) != std::string::npos, display_path << ": not an HDF5 file");
    const handle fapl = memory_fapl(handle(H5Pcreate(H5P_FILE_ACCESS), H5Pclose));
    RETEXO_ENSURE(H5Pset_file_image(fapl.get(), const_cast<char*>(image.data()), image.size()) >= 0,
                  display_path << ": cannot open as HDF5 (file image of " << image.size() << " bytes refused)");
    handle h(H5Fopen(memory_file_name().c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    RETEXO_ENSURE(h.valid(), display_path << ": cannot open as HDF5 (truncated or corrupt file?)");
    return {std::move(h), display_path};
}

file file::create_in_memory(const std::string& display_path)
{
    silence_errors();
    const handle fapl = memory_fapl(writer_fapl());
    handle h(H5Fcreate(memory_file_name().c_str(), H5F_ACC_TRUNC, writer_fcpl().get(), fapl.get()), H5Fclose);
    RETEXO_ENSURE(h.valid(), display_path << ": cannot create HDF5 file in memory");
    return {std::move(h), display_path};
}

std::vector<char> file::image() const
{
    RETEXO_ENSURE(H5Fflush(h_.get(), H5F_SCOPE_GLOBAL) >= 0, display_ << ": flush failed");
    const ssize_t size = H5Fget_file_image(h_.get(), nullptr, 0);
    RETEXO_ENSURE(size >= 0, display_ << ": cannot get the file image");
    std::vector<char> out(static_cast<std::size_t>(size));
    RETEXO_ENSURE(H5Fget_file_image(h_.get(), out.data(), out.size()) == size,
                  display_ << ": cannot get the file image");
    fix_superblock_checksum(out);
    return out;
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
    handle space(H5Aget_space(attr.get()), H5Sclose);
    RETEXO_ENSURE(H5Sget_simple_extent_npoints(space.get()) == 1,
                  display_ << ": attribute " << name << " does not hold exactly one string");
    if (H5Tis_variable_str(type.get()) > 0) { // as h5py writes a str by default
        handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(mem.get(), H5T_VARIABLE);
        char* text = nullptr;
        RETEXO_ENSURE(H5Aread(attr.get(), mem.get(), &text) >= 0, display_ << ": cannot read attribute " << name);
        std::string value = text != nullptr ? text : "";
        H5free_memory(text);
        return value;
    }
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
