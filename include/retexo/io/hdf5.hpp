#pragma once
/// @file hdf5.hpp
/// Thin RAII wrappers over the HDF5 C API.  Every failure becomes a retexo::error naming the
/// file and the object; HDF5's own error-stack printing is switched off.

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <hdf5.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace retexo::h5 {

/// Set when an object failed to close (HDF5 flushes a dataset's cached chunks when it closes
/// it: a full disk shows there): the file being written is then incomplete, and
/// file::close() reports it instead of letting it be committed.
inline std::atomic<bool> close_failed{false};

/// Owns one hid_t and closes it with the matching H5*close function.
class handle {
public:
    using closer = herr_t (*)(hid_t);
    handle() = default;
    handle(hid_t id, closer close) : id_(id), close_(close) {}
    handle(handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
    handle& operator=(handle&& o) noexcept
    {
        if (this != &o) {
            reset();
            id_ = std::exchange(o.id_, H5I_INVALID_HID);
            close_ = o.close_;
        }
        return *this;
    }
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    ~handle() { reset(); }

    hid_t get() const noexcept { return id_; }
    bool valid() const noexcept { return id_ >= 0; }
    void reset() noexcept
    {
        if (id_ >= 0 && close_ != nullptr && close_(id_) < 0) close_failed = true;
        id_ = H5I_INVALID_HID;
    }
    /// Give up ownership: the id, no longer closed here.
    hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }

private:
    hid_t id_ = H5I_INVALID_HID;
    closer close_ = nullptr;
};

/// HDF5 native type of T (float, double, int8, uint16, int32, int64).
template <typename T>
hid_t native_type();

/// An open HDF5 file; every error message names its path.
class file {
public:
    /// Open an existing file read-only (or read-write).  Throws if missing, unreadable,
    /// not HDF5, or truncated.
    static file open(const std::string& path, bool writable = false);
    /// Create (truncate) a file.  Callers wanting atomicity pass an atomic_file's temp path
    /// and `display_path` = the final name.
    static file create(const std::string& path, const std::string& display_path = {});
    /// Open or create with the MPI-IO driver, collectively over `comm` (parallel HDF5).
    static file create_parallel(const std::string& path, MPI_Comm comm, const std::string& display_path = {});
    /// Open a file image held in memory read-only, with HDF5's core driver: nothing touches
    /// the disk (tests, fuzzing).  The bytes are copied; `display_path` names the file in
    /// error messages, which are those of open() (no "cannot open": there is no file).
    static file open_image(std::span<const char> image, const std::string& display_path);
    /// Create a file in memory (core driver, no backing store) written as create() writes;
    /// image() gives its bytes.  Meant for small files (tests, fuzzing).
    static file create_in_memory(const std::string& display_path);
    /// The file's bytes (flushed first): what open_image() reads.
    std::vector<char> image() const;

    file(file&&) noexcept = default;
    file& operator=(file&&) noexcept = default;
    /// Closes the file if close() did not.  A file this process created that is closed by an
    /// exception (or after an object of it failed to close) is emptied first: it is discarded
    /// anyway, and HDF5 1.10 crashes at exit after a close that failed to write (full disk).
    ~file();

    hid_t id() const noexcept { return h_.get(); }
    const std::string& path() const noexcept { return display_; }
    /// Close the file; a file being written throws, naming it, if its data could not all be
    /// written (a full disk: close before committing it).
    void close();

    bool exists(const std::string& object) const;
    /// Dimensions of a dataset (throws naming the dataset if absent).
    std::vector<hsize_t> dims(const std::string& dataset) const;
    handle open_dataset(const std::string& dataset) const;
    /// Create intermediate groups of `object` ("a/b/c" creates a and a/b).
    void make_groups(const std::string& object);

    /// Create a dataset of shape dims, chunked along the first dimension: chunk_rows rows a
    /// chunk, or about 1 MiB (chunk_rows_for) when 0.  Each chunk carries HDF5's Fletcher-32
    /// checksum, so a reader rejects a chunk whose bytes changed (not in a parallel file,
    /// whose datasets are contiguous unless chunk_rows > 0, and unfiltered).
    template <typename T>
    handle create_dataset(const std::string& name, std::span<const hsize_t> dims, hsize_t chunk_rows = 0);
    /// A 1-D dataset that grows by append() (chunked, unlimited), empty at first.
    template <typename T>
    handle create_growing(const std::string& name, hsize_t chunk);
    /// Append values to a growing dataset that holds `at` values so far.
    template <typename T>
    void append(const handle& dataset, const std::string& name, hsize_t at, std::span<const T> values) const;
    /// Write rows [row0, row0 + rows) of a 1-D or 2-D dataset; `cols` = row width.
    template <typename T>
    void write_rows(const handle& dataset, const std::string& name, hsize_t row0, hsize_t rows, hsize_t cols,
                    const T* data, hid_t xfer = H5P_DEFAULT) const;
    /// Read rows [row0, row0 + rows) into `out` (rows * cols values).
    template <typename T>
    void read_rows(const handle& dataset, const std::string& name, hsize_t row0, hsize_t rows, hsize_t cols,
                   T* out) const;

    /// Create and fill a whole dataset.
    template <typename T>
    void write(const std::string& name, std::span<const T> data, std::vector<hsize_t> dims = {});
    /// Read a whole 1-D dataset, checking its length when expected_len >= 0.
    template <typename T>
    std::vector<T> read_vector(const std::string& name, std::int64_t expected_len = -1) const;
    /// A matrix as a 2-D dataset (rows x cols).
    template <typename T>
    void write_matrix(const std::string& name, const matrix<T>& m);
    /// Read a whole 2-D dataset, checking its width when expected_cols >= 0.
    template <typename T>
    matrix<T> read_matrix(const std::string& name, std::int64_t expected_cols = -1) const;

    void set_attr(const std::string& name, const std::string& value);
    void set_attr(const std::string& name, std::int64_t value);
    void set_attr(const std::string& name, double value);
    std::string attr_string(const std::string& name) const;
    std::int64_t attr_int(const std::string& name) const;
    double attr_double(const std::string& name) const;
    bool has_attr(const std::string& name) const;

private:
    file(handle h, std::string display, std::string created = {})
        : h_(std::move(h)), display_(std::move(display)), created_(std::move(created))
    {
    }
    /// Empty the created file on disk (freeing its space) and close it.
    void discard() noexcept;
    handle h_;
    std::string display_;
    std::string created_;   ///< the path on disk of a file create() made (else empty)
    bool parallel_ = false; ///< made by create_parallel (MPI-IO): no filters
};

/// Rows per chunk for a 2-D dataset of `cols` floats per row: about 1 MiB per chunk, so a
/// chunk fits HDF5's default chunk cache.
constexpr hsize_t chunk_rows_for(hsize_t cols, hsize_t elem_size = 4)
{
    const hsize_t row_bytes = cols * elem_size > 0 ? cols * elem_size : 1;
    const hsize_t rows = (hsize_t{1} << 20) / row_bytes;
    return rows < 1 ? 1 : (rows > 65536 ? 65536 : rows);
}

/// Switch off HDF5's automatic error printing (done once, process-wide).
void silence_errors();

/// What HDF5 says went wrong first in the last failed call of this thread (the innermost
/// entry of its error stack, such as "data error detected by Fletcher32 checksum"); empty if
/// nothing.
std::string error_detail();

} // namespace retexo::h5

#include <retexo/io/hdf5_impl.hpp>
