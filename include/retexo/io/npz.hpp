#pragma once
/// @file npz.hpp
/// NumPy .npz archives (a ZIP archive of .npy files, as np.savez / np.savez_compressed write
/// them): a streaming reader of one array, converting its elements in blocks, and a streaming
/// writer (tests and generators).  Entries may be stored or deflated and may carry ZIP64 extra
/// fields; .npy headers of version 1.0, 2.0 and 3.0 are read.  Only C-order arrays of
/// little- or big-endian bool, integers and float16/32/64 are supported.

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace retexo {

/// The element type of a .npy array: kind 'b' (bool), 'i', 'u' or 'f', size in bytes.
struct npy_dtype {
    char kind = 'f';
    int size = 4;
    bool big_endian = false;
    std::string descr; ///< as the header spells it, e.g. "<f4"
    bool integral() const noexcept { return kind != 'f'; }
};

/// Names of the arrays in an .npz archive (entry names without ".npy"), in archive order.
std::vector<std::string> npz_arrays(const std::string& path);

/// Streams the elements of one array of an .npz archive in C order.  Memory is a fixed buffer
/// whatever the array's size.  Every malformed input throws a retexo::error naming the archive
/// and the entry.  The CRC-32 of the entry is checked when all of it has been read.
class npz_array_reader {
public:
    /// Open array `name` (the entry name.npy) of the archive at `path`.
    npz_array_reader(const std::string& path, const std::string& name);
    /// Open array `name` of an archive held in memory, which must outlive the reader; `path`
    /// stands for the archive in error messages.  Nothing touches the disk; the archive is
    /// parsed by the same code as a file's (tests, fuzzing).
    npz_array_reader(const std::string& path, std::span<const char> archive, const std::string& name);
    ~npz_array_reader();
    npz_array_reader(const npz_array_reader&) = delete;
    npz_array_reader& operator=(const npz_array_reader&) = delete;

    const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
    const npy_dtype& dtype() const noexcept { return dtype_; }
    std::int64_t size() const noexcept { return size_; }         ///< number of elements
    std::int64_t position() const noexcept { return position_; } ///< elements consumed so far
    std::int64_t remaining() const noexcept { return size_ - position_; }
    /// "path: entry name.npy" for error messages.
    const std::string& where() const noexcept { return where_; }
    /// The shape as "(2, 5)".
    std::string shape_string() const;

    /// Skip elements (read through them when the entry is deflated).
    void skip(std::int64_t elements);
    /// Read the next min(out.size(), remaining()) elements converted to the target type;
    /// returns how many.  Integer targets need an integer dtype and throw naming the element if
    /// a value does not fit; floating targets take any dtype (float16 is widened exactly).
    std::size_t read(std::span<std::int64_t> out);
    std::size_t read(std::span<std::int32_t> out);
    std::size_t read(std::span<float> out);
    std::size_t read(std::span<double> out);

private:
    template <typename T>
    std::size_t read_as(std::span<T> out);
    void open_entry(const std::string& path, const std::string& name);
    void read_bytes(char* out, std::size_t n);
    void fill_input();

    std::string where_;
    int fd_ = -1;                  ///< the archive's file, or -1 when it is in memory_
    std::span<const char> memory_; ///< the archive held in memory
    std::uint16_t method_ = 0;
    std::uint32_t crc_expected_ = 0, crc_ = 0;
    bool crc_valid_ = true; ///< every byte so far went through the CRC (no seek over data)
    std::uint64_t data_offset_ = 0, compressed_size_ = 0, uncompressed_size_ = 0;
    std::uint64_t compressed_read_ = 0, uncompressed_read_ = 0;
    std::unique_ptr<struct npz_inflate_state> z_;
    std::vector<char> in_buf_, raw_buf_;
    npy_dtype dtype_;
    std::vector<std::int64_t> shape_;
    std::int64_t size_ = 0, position_ = 0;
};

/// Writes an .npz archive entry by entry, each streamed (stored or deflated); close() writes
/// the central directory.  It writes what it is given (also malformed entries, for tests).
class npz_writer {
public:
    struct entry_options {
        bool deflate = true;
        bool zip64 = false;  ///< ZIP64 extra fields for this entry (np.savez forces them locally)
        int npy_version = 1; ///< 1, 2 or 3
        bool fortran_order = false;
    };

    /// zip64: also write the ZIP64 end-of-central-directory records (needed past 4 GiB or 65535
    /// entries, which are detected anyway).
    explicit npz_writer(const std::string& path, bool zip64 = false);
    /// Write the archive into memory: close() stores it in *out (which must outlive the
    /// writer); `name` stands for it in error messages.  Nothing touches the disk.
    npz_writer(std::string* out, const std::string& name, bool zip64 = false);
    ~npz_writer();
    npz_writer(const npz_writer&) = delete;
    npz_writer& operator=(const npz_writer&) = delete;

    /// Start array `name` (entry name.npy) with dtype descr (e.g. "<f4") and shape; its data
    /// follows through write() in C order.
    void begin_array(const std::string& name, const std::string& descr, const std::vector<std::int64_t>& shape,
                     const entry_options& options);
    /// Start an entry with arbitrary content (no .npy header is written).
    void begin_entry(const std::string& entry_name, const entry_options& options);
    void write(const void* data, std::size_t bytes);
    void end_entry();
    /// Write the central directory and close the file.
    void close();

    /// A whole array in one call.
    template <typename T>
    void add(const std::string& name, const std::string& descr, const std::vector<std::int64_t>& shape,
             std::span<const T> values, const entry_options& options)
    {
        begin_array(name, descr, shape, options);
        write(values.data(), values.size_bytes());
        end_entry();
    }

private:
    void put(const void* data, std::size_t bytes);
    struct entry {
        std::string name;
        std::uint64_t offset = 0, compressed = 0, uncompressed = 0;
        std::uint32_t crc = 0;
        bool deflate = false, zip64 = false;
    };
    std::string path_;
    std::FILE* f_ = nullptr;
    bool zip64_ = false;
    std::string* memory_out_ = nullptr; ///< memory mode: f_ is an open_memstream over memory_
    char* memory_ = nullptr;
    std::size_t memory_size_ = 0;
    std::vector<entry> entries_;
    bool open_entry_ = false;
    std::unique_ptr<struct npz_deflate_state> z_;
    std::vector<unsigned char> out_buf_;
};

/// IEEE half precision bits to float (exact).
float half_to_float(std::uint16_t h) noexcept;
/// Float to IEEE half precision bits (round to nearest even).
std::uint16_t float_to_half(float f) noexcept;

} // namespace retexo
