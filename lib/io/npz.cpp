// Streaming reader and writer of .npz archives (stored or deflated, ZIP64, .npy 1-3).
#include <retexo/io/npz.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <zlib.h>

namespace retexo {

struct npz_inflate_state {
    z_stream z{};
    bool open = false;
    ~npz_inflate_state()
    {
        if (open) inflateEnd(&z);
    }
};

struct npz_deflate_state {
    z_stream z{};
    bool open = false;
    ~npz_deflate_state()
    {
        if (open) deflateEnd(&z);
    }
};

namespace {

constexpr std::uint32_t sig_local = 0x04034b50;
constexpr std::uint32_t sig_central = 0x02014b50;
constexpr std::uint32_t sig_eocd = 0x06054b50;
constexpr std::uint32_t sig_zip64_eocd = 0x06064b50;
constexpr std::uint32_t sig_zip64_locator = 0x07064b50;
constexpr std::uint32_t max32 = 0xFFFFFFFFU;
constexpr std::uint16_t max16 = 0xFFFFU;

std::uint16_t get16(const unsigned char* p)
{
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t get32(const unsigned char* p)
{
    return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
           (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t get64(const unsigned char* p)
{
    return static_cast<std::uint64_t>(get32(p)) | (static_cast<std::uint64_t>(get32(p + 4)) << 32);
}

/// The bytes of an archive: an open file (fd >= 0), or a buffer in memory.
struct archive_bytes {
    int fd = -1;
    std::span<const char> memory;
};

/// Read exactly n bytes at offset (throws naming `what` when the archive ends first).
void pread_all(const archive_bytes& a, void* out, std::size_t n, std::uint64_t offset, const std::string& what)
{
    auto* p = static_cast<char*>(out);
    while (n > 0) {
        ssize_t got = 0;
        if (a.fd < 0) {
            if (offset < a.memory.size()) {
                got = static_cast<ssize_t>(std::min<std::uint64_t>(n, a.memory.size() - offset));
                std::memcpy(p, a.memory.data() + offset, static_cast<std::size_t>(got));
            }
        } else {
            got = ::pread(a.fd, p, n, static_cast<off_t>(offset));
        }
        if (got < 0 && errno == EINTR) continue;
        RETEXO_ENSURE(got >= 0, what << ": read error: " << std::strerror(errno));
        RETEXO_ENSURE(got > 0, what << ": truncated (the file ends at byte " << offset << ")");
        p += got;
        n -= static_cast<std::size_t>(got);
        offset += static_cast<std::uint64_t>(got);
    }
}

struct zip_entry {
    std::string name;
    std::uint16_t flags = 0, method = 0;
    std::uint32_t crc = 0;
    std::uint64_t compressed = 0, uncompressed = 0, offset = 0;
};

struct zip_directory {
    std::uint64_t file_size = 0;
    std::uint64_t cd_offset = 0; ///< entry data must end before the central directory
    std::vector<zip_entry> entries;
};

/// The central directory of a ZIP archive (ZIP64 records and extra fields read).
zip_directory read_directory(const archive_bytes& archive, const std::string& path)
{
    zip_directory dir;
    if (archive.fd >= 0) {
        struct stat st {};
        RETEXO_ENSURE(::fstat(archive.fd, &st) == 0, path << ": cannot stat: " << std::strerror(errno));
        dir.file_size = static_cast<std::uint64_t>(st.st_size);
    } else {
        dir.file_size = archive.memory.size();
    }
    // The end-of-central-directory record is the last 22 bytes plus a comment of up to 64 KiB.
    const std::uint64_t tail_len = std::min<std::uint64_t>(dir.file_size, 22 + 0xFFFF + 20);
    std::vector<unsigned char> tail(tail_len);
    pread_all(archive, tail.data(), tail.size(), dir.file_size - tail_len, path);
    std::int64_t at = -1;
    for (std::int64_t p = static_cast<std::int64_t>(tail_len) - 22; p >= 0; --p)
        if (get32(&tail[p]) == sig_eocd && static_cast<std::uint64_t>(p) + 22 + get16(&tail[p + 20]) <= tail_len) {
            at = p;
            break;
        }
    RETEXO_ENSURE(at >= 0, path << ": not a ZIP/.npz archive, or truncated (no end-of-central-directory record)");
    const unsigned char* e = &tail[at];
    RETEXO_ENSURE(get16(e + 4) == 0 && get16(e + 6) == 0, path << ": multi-disk ZIP archives are not supported");
    std::uint64_t count = get16(e + 10);
    std::uint64_t cd_size = get32(e + 12);
    std::uint64_t cd_offset = get32(e + 16);
    const std::uint64_t eocd_pos = dir.file_size - tail_len + static_cast<std::uint64_t>(at);
    std::uint64_t cd_end = eocd_pos;
    if (at >= 20 && get32(e - 20) == sig_zip64_locator) {
        const std::uint64_t z64 = get64(e - 20 + 8);
        unsigned char r[56];
        RETEXO_ENSURE(z64 <= eocd_pos && eocd_pos - z64 >= 56,
                      path << ": corrupt ZIP64 end-of-central-directory locator");
        pread_all(archive, r, sizeof r, z64, path);
        RETEXO_ENSURE(get32(r) == sig_zip64_eocd, path << ": corrupt ZIP64 end-of-central-directory record");
        count = get64(r + 32);
        cd_size = get64(r + 40);
        cd_offset = get64(r + 48);
        cd_end = z64;
    } else {
        RETEXO_ENSURE(count != max16 && cd_size != max32 && cd_offset != max32,
                      path << ": ZIP64 archive without its ZIP64 end-of-central-directory record (truncated?)");
    }
    RETEXO_ENSURE(cd_offset <= cd_end && cd_size <= cd_end - cd_offset,
                  path << ": the central directory lies outside the file (truncated or corrupt archive)");
    RETEXO_ENSURE(cd_size <= (std::uint64_t{256} << 20),
                  path << ": central directory of " << cd_size << " bytes is implausibly large");
    dir.cd_offset = cd_offset;
    std::vector<unsigned char> cd(cd_size);
    pread_all(archive, cd.data(), cd.size(), cd_offset, path);
    std::size_t p = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
        RETEXO_ENSURE(p + 46 <= cd.size() && get32(&cd[p]) == sig_central,
                      path << ": corrupt central directory (entry " << i << ")");
        const unsigned char* c = &cd[p];
        zip_entry z;
        z.flags = get16(c + 8);
        z.method = get16(c + 10);
        z.crc = get32(c + 16);
        z.compressed = get32(c + 20);
        z.uncompressed = get32(c + 24);
        const std::size_t name_len = get16(c + 28), extra_len = get16(c + 30), comment_len = get16(c + 32);
        const std::uint16_t disk = get16(c + 34);
        z.offset = get32(c + 42);
        RETEXO_ENSURE(p + 46 + name_len + extra_len + comment_len <= cd.size(),
                      path << ": corrupt central directory (entry " << i << " runs past its end)");
        z.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
        // ZIP64 extended information: 64-bit values for the fields saturated at 0xFFFFFFFF.
        const unsigned char* x = c + 46 + name_len;
        for (std::size_t q = 0; q + 4 <= extra_len;) {
            const std::uint16_t id = get16(x + q), len = get16(x + q + 2);
            RETEXO_ENSURE(q + 4 + len <= extra_len, path << ": " << z.name << ": corrupt extra field");
            if (id == 0x0001) {
                std::size_t r = q + 4;
                const std::size_t end = q + 4 + len;
                auto take = [&](std::uint64_t& field) {
                    if (field != max32) return;
                    RETEXO_ENSURE(r + 8 <= end, path << ": " << z.name << ": ZIP64 extra field too short");
                    field = get64(x + r);
                    r += 8;
                };
                take(z.uncompressed);
                take(z.compressed);
                take(z.offset);
            }
            q += 4 + len;
        }
        RETEXO_ENSURE(disk == 0 || disk == max16, path << ": multi-disk ZIP archives are not supported");
        dir.entries.push_back(std::move(z));
        p += 46 + name_len + extra_len + comment_len;
    }
    return dir;
}

/// A Python dict literal as numpy writes .npy headers: string keys; string, True/False or
/// tuple-of-integers values.
struct npy_header {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
};

npy_header parse_npy_header(std::string_view s, const std::string& where)
{
    npy_header h;
    bool have_descr = false, have_order = false, have_shape = false;
    std::size_t i = 0;
    auto fail = [&](const std::string& what) {
        RETEXO_THROW(where << ": malformed .npy header (" << what << " at character " << i << "): " << s);
    };
    auto ws = [&] {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
            ++i;
    };
    auto string_lit = [&] {
        ws();
        if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) fail("expected a string");
        const char q = s[i++];
        const auto end = s.find(q, i);
        if (end == std::string_view::npos) fail("unterminated string");
        std::string out(s.substr(i, end - i));
        i = end + 1;
        return out;
    };
    ws();
    if (i >= s.size() || s[i] != '{') fail("expected '{'");
    ++i;
    while (true) {
        ws();
        if (i < s.size() && s[i] == '}') break;
        const std::string key = string_lit();
        ws();
        if (i >= s.size() || s[i] != ':') fail("expected ':'");
        ++i;
        ws();
        if (key == "descr") {
            if (i < s.size() && s[i] == '[') fail("structured dtypes are not supported");
            h.descr = string_lit();
            have_descr = true;
        } else if (key == "fortran_order") {
            if (s.substr(i, 4) == "True") {
                h.fortran_order = true;
                i += 4;
            } else if (s.substr(i, 5) == "False") {
                h.fortran_order = false;
                i += 5;
            } else {
                fail("fortran_order must be True or False");
            }
            have_order = true;
        } else if (key == "shape") {
            if (i >= s.size() || s[i] != '(') fail("expected a shape tuple");
            ++i;
            while (true) {
                ws();
                if (i < s.size() && s[i] == ')') {
                    ++i;
                    break;
                }
                std::int64_t v = 0;
                const auto [ptr, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
                if (ec != std::errc() || v < 0) fail("expected a non-negative dimension");
                i = static_cast<std::size_t>(ptr - s.data());
                if (i < s.size() && s[i] == 'L') ++i; // Python 2 longs
                h.shape.push_back(v);
                ws();
                if (i < s.size() && s[i] == ',') {
                    ++i;
                } else if (i >= s.size() || s[i] != ')') {
                    fail("expected ',' or ')' in the shape");
                }
            }
            have_shape = true;
        } else {
            fail("unexpected key '" + key + "'");
        }
        ws();
        if (i < s.size() && s[i] == ',') {
            ++i;
        } else if (i >= s.size() || s[i] != '}') {
            fail("expected ',' or '}'");
        }
    }
    if (!have_descr || !have_order || !have_shape) fail("'descr', 'fortran_order' and 'shape' are all required");
    return h;
}

npy_dtype parse_dtype(const std::string& descr, const std::string& where)
{
    npy_dtype d;
    d.descr = descr;
    bool ok = descr.size() >= 3 && std::string_view("<>|=").find(descr[0]) != std::string_view::npos;
    if (ok) {
        d.kind = descr[1];
        const std::string size = descr.substr(2);
        d.size = size == "1" ? 1 : size == "2" ? 2 : size == "4" ? 4 : size == "8" ? 8 : 0;
        d.big_endian = descr[0] == '>' || (descr[0] == '=' && std::endian::native == std::endian::big);
        ok = (d.kind == 'i' || d.kind == 'u') ? d.size != 0
             : d.kind == 'f'                  ? (d.size == 2 || d.size == 4 || d.size == 8)
             : d.kind == 'b'                  ? d.size == 1
                                              : false;
    }
    RETEXO_ENSURE(ok, where << ": unsupported dtype '" << descr
                            << "' (supported: bool, signed and unsigned integers, float16/32/64)");
    return d;
}

void byteswap_items(char* p, std::size_t count, int size)
{
    for (std::size_t k = 0; k < count; ++k, p += size)
        std::reverse(p, p + size);
}

template <typename S>
S load(const char* p)
{
    S v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

} // namespace

float half_to_float(std::uint16_t h) noexcept
{
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1FU;
    std::uint32_t mant = h & 0x3FFU;
    std::uint32_t bits = 0;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000U | (mant << 13); // inf or NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { // subnormal: normalise
        int e = 113;
        while ((mant & 0x400U) == 0) {
            mant <<= 1;
            --e;
        }
        bits = sign | (static_cast<std::uint32_t>(e) << 23) | ((mant & 0x3FFU) << 13);
    }
    return std::bit_cast<float>(bits);
}

std::uint16_t float_to_half(float f) noexcept
{
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (x >> 16) & 0x8000U;
    const std::uint32_t abs = x & 0x7FFFFFFFU;
    if (abs >= 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7C00U | (abs > 0x7F800000U ? 0x200U : 0));
    if (abs >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U); // rounds past 65504: inf
    if (abs < 0x38800000U) {                                                   // subnormal half or zero
        if (abs < 0x33000000U) return static_cast<std::uint16_t>(sign);
        const std::uint32_t e = abs >> 23;
        const std::uint32_t m = (abs & 0x7FFFFFU) | 0x800000U;
        const std::uint32_t shift = 126 - e; // 14 .. 24
        std::uint32_t r = m >> shift;
        const std::uint32_t rem = m & ((1U << shift) - 1), half = 1U << (shift - 1);
        if (rem > half || (rem == half && (r & 1U) != 0)) ++r;
        return static_cast<std::uint16_t>(sign | r);
    }
    std::uint32_t r = ((abs - 0x38000000U) >> 13); // rebias exponent 127 -> 15
    const std::uint32_t rem = abs & 0x1FFFU;
    if (rem > 0x1000U || (rem == 0x1000U && (r & 1U) != 0)) ++r;
    return static_cast<std::uint16_t>(sign | r);
}

std::vector<std::string> npz_arrays(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RETEXO_ENSURE(fd >= 0, path << ": cannot open: " << std::strerror(errno));
    std::vector<std::string> names;
    try {
        for (const auto& e : read_directory({.fd = fd}, path).entries) {
            std::string n = e.name;
            if (n.size() > 4 && n.ends_with(".npy")) n.resize(n.size() - 4);
            names.push_back(n);
        }
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return names;
}

npz_array_reader::npz_array_reader(const std::string& path, const std::string& name)
    : where_(path + ": entry " + name + ".npy"), z_(std::make_unique<npz_inflate_state>())
{
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RETEXO_ENSURE(fd_ >= 0, path << ": cannot open: " << std::strerror(errno));
    try {
        open_entry(path, name);
    } catch (...) {
        ::close(fd_);
        throw;
    }
}

npz_array_reader::npz_array_reader(const std::string& path, std::span<const char> archive, const std::string& name)
    : where_(path + ": entry " + name + ".npy"), memory_(archive), z_(std::make_unique<npz_inflate_state>())
{
    open_entry(path, name);
}

void npz_array_reader::open_entry(const std::string& path, const std::string& name)
{
    const archive_bytes archive{fd_, memory_};
    const zip_directory dir = read_directory(archive, path);
    const std::string entry_name = name + ".npy";
    const auto it =
        std::find_if(dir.entries.begin(), dir.entries.end(), [&](const zip_entry& e) { return e.name == entry_name; });
    if (it == dir.entries.end()) {
        std::string list;
        for (const auto& e : dir.entries)
            list += (list.empty() ? "" : ", ") + e.name;
        RETEXO_THROW(path << ": no array '" << name << "' (entry " << entry_name
                          << " missing; the archive holds: " << (list.empty() ? "nothing" : list) << ")");
    }
    RETEXO_ENSURE((it->flags & 1U) == 0, where_ << ": encrypted entries are not supported");
    RETEXO_ENSURE(it->method == 0 || it->method == 8,
                  where_ << ": compression method " << it->method
                         << " is not supported (only stored and deflated entries, as numpy writes)");
    method_ = it->method;
    crc_expected_ = it->crc;
    compressed_size_ = it->compressed;
    uncompressed_size_ = it->uncompressed;
    RETEXO_ENSURE(method_ != 0 || compressed_size_ == uncompressed_size_,
                  where_ << ": stored entry with compressed size " << compressed_size_ << " != size "
                         << uncompressed_size_);
    unsigned char local[30];
    RETEXO_ENSURE(it->offset <= dir.cd_offset && dir.cd_offset - it->offset >= 30,
                  where_ << ": local header lies outside the archive data");
    pread_all(archive, local, sizeof local, it->offset, where_);
    RETEXO_ENSURE(get32(local) == sig_local, where_ << ": corrupt local header (bad signature)");
    data_offset_ = it->offset + 30 + get16(local + 26) + get16(local + 28);
    RETEXO_ENSURE(data_offset_ <= dir.cd_offset && compressed_size_ <= dir.cd_offset - data_offset_,
                  where_ << ": entry data (" << compressed_size_ << " bytes at " << data_offset_
                         << ") runs past the archive's data (truncated or corrupt archive)");
    // Deflate expands at most 1032:1; a larger claim is corrupt (and would size buffers).
    RETEXO_ENSURE(method_ != 8 || uncompressed_size_ / 1032 <= compressed_size_,
                  where_ << ": size " << uncompressed_size_ << " is impossible for " << compressed_size_
                         << " deflated bytes (corrupt archive)");
    if (method_ == 8) {
        RETEXO_ENSURE(inflateInit2(&z_->z, -MAX_WBITS) == Z_OK, where_ << ": zlib inflateInit2 failed");
        z_->open = true;
        // The buffers hold at most 1 MiB (fill_input, read_as), less for a smaller entry.
        in_buf_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(compressed_size_, std::uint64_t{1} << 20)));
    }
    crc_ = crc32_z(0L, Z_NULL, 0);

    // The .npy header.
    char pre[12];
    RETEXO_ENSURE(uncompressed_size_ >= 10,
                  where_ << ": too short for a .npy array (" << uncompressed_size_ << " bytes)");
    read_bytes(pre, 10);
    RETEXO_ENSURE(std::memcmp(pre, "\x93NUMPY", 6) == 0, where_ << ": not a .npy array (bad magic)");
    const int major = static_cast<unsigned char>(pre[6]);
    RETEXO_ENSURE(major >= 1 && major <= 3, where_ << ": .npy format version " << major << "."
                                                   << static_cast<int>(static_cast<unsigned char>(pre[7]))
                                                   << " is not supported (1.0, 2.0 and 3.0 are)");
    std::uint64_t header_len = get16(reinterpret_cast<unsigned char*>(pre + 8));
    std::uint64_t prefix = 10;
    if (major >= 2) {
        RETEXO_ENSURE(uncompressed_size_ >= 12, where_ << ": truncated .npy header");
        read_bytes(pre + 10, 2);
        header_len = get32(reinterpret_cast<unsigned char*>(pre + 8));
        prefix = 12;
    }
    RETEXO_ENSURE(header_len <= (std::uint64_t{1} << 20) && prefix + header_len <= uncompressed_size_,
                  where_ << ": .npy header of " << header_len << " bytes does not fit the entry's "
                         << uncompressed_size_ << " bytes (truncated?)");
    std::string header(header_len, '\0');
    read_bytes(header.data(), header.size());
    const npy_header h = parse_npy_header(header, where_);
    RETEXO_ENSURE(!h.fortran_order, where_ << ": fortran_order is True; only C-order arrays are supported "
                                              "(save with np.ascontiguousarray)");
    dtype_ = parse_dtype(h.descr, where_);
    shape_ = h.shape;
    std::uint64_t elements = 1;
    for (auto d : shape_)
        RETEXO_ENSURE(!__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements),
                      where_ << ": shape " << shape_string() << " overflows");
    std::uint64_t bytes = 0;
    RETEXO_ENSURE(!__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_.size), &bytes) &&
                      elements < (std::uint64_t{1} << 62),
                  where_ << ": shape " << shape_string() << " overflows");
    const std::uint64_t data_bytes = uncompressed_size_ - prefix - header_len;
    RETEXO_ENSURE(data_bytes == bytes, where_ << ": shape " << shape_string() << " of " << h.descr << " needs " << bytes
                                              << " bytes of data but the entry holds " << data_bytes
                                              << " (truncated or inconsistent array)");
    size_ = static_cast<std::int64_t>(elements);
    raw_buf_.resize(static_cast<std::size_t>(std::clamp<std::uint64_t>(data_bytes, 8, std::uint64_t{1} << 20)));
}

npz_array_reader::~npz_array_reader()
{
    if (fd_ >= 0) ::close(fd_);
}

std::string npz_array_reader::shape_string() const
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape_.size(); ++i)
        s += (i > 0 ? ", " : "") + std::to_string(shape_[i]);
    return s + (shape_.size() == 1 ? ",)" : ")");
}

void npz_array_reader::fill_input()
{
    const std::uint64_t left = compressed_size_ - compressed_read_;
    RETEXO_ENSURE(left > 0, where_ << ": deflate stream ends early (truncated or corrupt entry)");
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, in_buf_.size()));
    pread_all({fd_, memory_}, in_buf_.data(), n, data_offset_ + compressed_read_, where_);
    compressed_read_ += n;
    z_->z.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
    z_->z.avail_in = static_cast<uInt>(n);
}

void npz_array_reader::read_bytes(char* out, std::size_t n)
{
    RETEXO_ENSURE(n <= uncompressed_size_ - uncompressed_read_, where_ << ": read past the end of the entry");
    if (method_ == 0) {
        pread_all({fd_, memory_}, out, n, data_offset_ + uncompressed_read_, where_);
    } else {
        auto& z = z_->z;
        std::size_t done = 0;
        while (done < n) {
            const auto chunk = static_cast<uInt>(std::min<std::size_t>(n - done, std::size_t{1} << 30));
            z.next_out = reinterpret_cast<Bytef*>(out + done);
            z.avail_out = chunk;
            while (z.avail_out > 0) {
                if (z.avail_in == 0) fill_input();
                const int rc = inflate(&z, Z_NO_FLUSH);
                if (rc == Z_STREAM_END) {
                    RETEXO_ENSURE(z.avail_out == 0, where_ << ": deflate stream ends after "
                                                           << uncompressed_read_ + done + (chunk - z.avail_out)
                                                           << " of " << uncompressed_size_ << " bytes");
                    break;
                }
                RETEXO_ENSURE(rc == Z_OK || rc == Z_BUF_ERROR, where_ << ": corrupt deflate data (zlib: "
                                                                      << (z.msg != nullptr ? z.msg : "error") << ")");
            }
            done += chunk;
        }
    }
    if (crc_valid_) crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(out), n);
    uncompressed_read_ += n;
    if (uncompressed_read_ == uncompressed_size_ && crc_valid_)
        RETEXO_ENSURE(crc_ == crc_expected_, where_ << ": CRC-32 mismatch (corrupt entry)");
}

void npz_array_reader::skip(std::int64_t elements)
{
    RETEXO_ENSURE(elements >= 0 && elements <= remaining(),
                  where_ << ": cannot skip " << elements << " elements, " << remaining() << " remain");
    const auto bytes = static_cast<std::uint64_t>(elements) * static_cast<std::uint64_t>(dtype_.size);
    if (method_ == 0) {
        if (bytes > 0) crc_valid_ = false;
        uncompressed_read_ += bytes;
    } else {
        for (std::uint64_t left = bytes; left > 0;) {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, raw_buf_.size()));
            read_bytes(raw_buf_.data(), n);
            left -= n;
        }
    }
    position_ += elements;
}

template <typename T>
std::size_t npz_array_reader::read_as(std::span<T> out)
{
    constexpr bool integral_target = std::is_integral_v<T>;
    if constexpr (integral_target)
        RETEXO_ENSURE(dtype_.integral(), where_ << ": expected an integer array, found dtype '" << dtype_.descr << "'");
    const auto total =
        static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(out.size()), remaining()));
    const std::size_t per_chunk = raw_buf_.size() / static_cast<std::size_t>(dtype_.size);
    T* dst = out.data();
    for (std::size_t done = 0; done < total;) {
        const std::size_t k = std::min(per_chunk, total - done);
        char* src = raw_buf_.data();
        read_bytes(src, k * static_cast<std::size_t>(dtype_.size));
        if (dtype_.big_endian && dtype_.size > 1) byteswap_items(src, k, dtype_.size);
        const std::int64_t first = position_ + static_cast<std::int64_t>(done);
        auto convert = [&]<typename S>(S) {
            for (std::size_t j = 0; j < k; ++j) {
                const S v = load<S>(src + j * sizeof(S));
                if constexpr (integral_target && std::is_integral_v<S> && !std::is_same_v<S, T>) {
                    if (!std::in_range<T>(v))
                        RETEXO_THROW(where_ << ": element " << first + static_cast<std::int64_t>(j) << " is " << +v
                                            << ", which does not fit in " << 8 * sizeof(T) << " bits"
                                            << (sizeof(T) == 4 ? " (node ids must be below 2^31)" : ""));
                }
                // NOLINTNEXTLINE(bugprone-signed-char-misuse): int8 values, sign-extended on purpose
                dst[done + j] = static_cast<T>(v);
            }
        };
        switch (dtype_.kind == 'f' ? 100 + dtype_.size
                                   : (dtype_.kind == 'u' || dtype_.kind == 'b' ? 10 : 0) + dtype_.size) {
        case 1:
            convert(std::int8_t{});
            break;
        case 2:
            convert(std::int16_t{});
            break;
        case 4:
            convert(std::int32_t{});
            break;
        case 8:
            convert(std::int64_t{});
            break;
        case 11:
            convert(std::uint8_t{});
            break;
        case 12:
            convert(std::uint16_t{});
            break;
        case 14:
            convert(std::uint32_t{});
            break;
        case 18:
            convert(std::uint64_t{});
            break;
        case 104:
            convert(float{});
            break;
        case 108:
            convert(double{});
            break;
        case 102:
            if constexpr (!integral_target)
                for (std::size_t j = 0; j < k; ++j)
                    dst[done + j] = static_cast<T>(half_to_float(load<std::uint16_t>(src + 2 * j)));
            break;
        default:
            RETEXO_THROW(where_ << ": unsupported dtype '" << dtype_.descr << "'");
        }
        done += k;
    }
    position_ += static_cast<std::int64_t>(total);
    return total;
}

std::size_t npz_array_reader::read(std::span<std::int64_t> out)
{
    return read_as(out);
}
std::size_t npz_array_reader::read(std::span<std::int32_t> out)
{
    return read_as(out);
}
std::size_t npz_array_reader::read(std::span<float> out)
{
    return read_as(out);
}
std::size_t npz_array_reader::read(std::span<double> out)
{
    return read_as(out);
}

// ---- writer ----

namespace {
void put16(std::string& s, std::uint16_t v)
{
    s += static_cast<char>(v & 0xFF);
    s += static_cast<char>(v >> 8);
}
void put32(std::string& s, std::uint32_t v)
{
    put16(s, static_cast<std::uint16_t>(v & 0xFFFF));
    put16(s, static_cast<std::uint16_t>(v >> 16));
}
void put64(std::string& s, std::uint64_t v)
{
    put32(s, static_cast<std::uint32_t>(v & max32));
    put32(s, static_cast<std::uint32_t>(v >> 32));
}
constexpr std::uint16_t dos_date = (0 << 9) | (1 << 5) | 1; // 1980-01-01
} // namespace

npz_writer::npz_writer(const std::string& path, bool zip64)
    : path_(path), zip64_(zip64), z_(std::make_unique<npz_deflate_state>()), out_buf_(std::size_t{1} << 20)
{
    f_ = std::fopen(path.c_str(), "wb");
    RETEXO_ENSURE(f_ != nullptr, path << ": cannot create: " << std::strerror(errno));
}

npz_writer::npz_writer(std::string* out, const std::string& name, bool zip64)
    : path_(name), zip64_(zip64), memory_out_(out), z_(std::make_unique<npz_deflate_state>()),
      out_buf_(std::size_t{4} << 10)
{
    f_ = ::open_memstream(&memory_, &memory_size_);
    RETEXO_ENSURE(f_ != nullptr, path_ << ": cannot create: " << std::strerror(errno));
}

npz_writer::~npz_writer()
{
    if (f_ != nullptr) std::fclose(f_);
    std::free(memory_);
}

void npz_writer::put(const void* data, std::size_t bytes)
{
    RETEXO_ENSURE(std::fwrite(data, 1, bytes, f_) == bytes, path_ << ": write failed: " << std::strerror(errno));
}

void npz_writer::begin_entry(const std::string& entry_name, const entry_options& options)
{
    RETEXO_ENSURE(f_ != nullptr && !open_entry_, path_ << ": npz_writer: begin_entry while an entry is open");
    entry e;
    e.name = entry_name;
    e.offset = static_cast<std::uint64_t>(::ftello(f_));
    e.deflate = options.deflate;
    e.zip64 = options.zip64;
    std::string h;
    put32(h, sig_local);
    put16(h, e.zip64 ? 45 : 20);
    put16(h, 0);
    put16(h, e.deflate ? 8 : 0);
    put16(h, 0);
    put16(h, dos_date);
    put32(h, 0);                   // crc, patched
    put32(h, e.zip64 ? max32 : 0); // compressed size
    put32(h, e.zip64 ? max32 : 0); // size
    put16(h, static_cast<std::uint16_t>(e.name.size()));
    put16(h, e.zip64 ? 20 : 0);
    h += e.name;
    if (e.zip64) {
        put16(h, 0x0001);
        put16(h, 16);
        put64(h, 0);
        put64(h, 0);
    }
    put(h.data(), h.size());
    if (e.deflate) {
        if (z_->open) deflateEnd(&z_->z);
        z_->z = z_stream{};
        RETEXO_ENSURE(deflateInit2(&z_->z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                      path_ << ": zlib deflateInit2 failed");
        z_->open = true;
    }
    e.crc = static_cast<std::uint32_t>(crc32_z(0L, Z_NULL, 0));
    entries_.push_back(std::move(e));
    open_entry_ = true;
}

void npz_writer::begin_array(const std::string& name, const std::string& descr, const std::vector<std::int64_t>& shape,
                             const entry_options& options)
{
    begin_entry(name + ".npy", options);
    std::string dict =
        "{'descr': '" + descr + "', 'fortran_order': " + (options.fortran_order ? "True" : "False") + ", 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i)
        dict += (i > 0 ? ", " : "") + std::to_string(shape[i]);
    dict += shape.size() == 1 ? ",), }" : "), }";
    const std::size_t prefix = options.npy_version == 1 ? 10 : 12;
    while ((prefix + dict.size() + 1) % 64 != 0)
        dict += ' ';
    dict += '\n';
    std::string h = "\x93NUMPY";
    h += static_cast<char>(options.npy_version);
    h += '\0';
    if (options.npy_version == 1)
        put16(h, static_cast<std::uint16_t>(dict.size()));
    else
        put32(h, static_cast<std::uint32_t>(dict.size()));
    h += dict;
    write(h.data(), h.size());
}

void npz_writer::write(const void* data, std::size_t bytes)
{
    RETEXO_ENSURE(open_entry_, path_ << ": npz_writer: write outside an entry");
    auto& e = entries_.back();
    e.crc = static_cast<std::uint32_t>(crc32_z(e.crc, static_cast<const Bytef*>(data), bytes));
    e.uncompressed += bytes;
    if (!e.deflate) {
        put(data, bytes);
        e.compressed += bytes;
        return;
    }
    auto& z = z_->z;
    const auto* p = static_cast<const Bytef*>(data);
    while (bytes > 0) {
        const auto chunk = static_cast<uInt>(std::min<std::size_t>(bytes, std::size_t{1} << 30));
        z.next_in = const_cast<Bytef*>(p);
        z.avail_in = chunk;
        while (z.avail_in > 0) {
            z.next_out = out_buf_.data();
            z.avail_out = static_cast<uInt>(out_buf_.size());
            RETEXO_ENSURE(deflate(&z, Z_NO_FLUSH) != Z_STREAM_ERROR, path_ << ": zlib deflate failed");
            const std::size_t n = out_buf_.size() - z.avail_out;
            put(out_buf_.data(), n);
            e.compressed += n;
        }
        p += chunk;
        bytes -= chunk;
    }
}

void npz_writer::end_entry()
{
    RETEXO_ENSURE(open_entry_, path_ << ": npz_writer: end_entry without an entry");
    auto& e = entries_.back();
    if (e.deflate) {
        auto& z = z_->z;
        z.next_in = nullptr;
        z.avail_in = 0;
        int rc = Z_OK;
        while (rc != Z_STREAM_END) {
            z.next_out = out_buf_.data();
            z.avail_out = static_cast<uInt>(out_buf_.size());
            rc = deflate(&z, Z_FINISH);
            RETEXO_ENSURE(rc == Z_OK || rc == Z_STREAM_END, path_ << ": zlib deflate failed");
            const std::size_t n = out_buf_.size() - z.avail_out;
            put(out_buf_.data(), n);
            e.compressed += n;
        }
        deflateEnd(&z);
        z_->open = false;
    }
    RETEXO_ENSURE(e.zip64 || (e.compressed < max32 && e.uncompressed < max32),
                  path_ << ": " << e.name << " exceeds 4 GiB; write it with zip64");
    const auto end = ::ftello(f_);
    std::string patch;
    put32(patch, e.crc);
    if (!e.zip64) {
        put32(patch, static_cast<std::uint32_t>(e.compressed));
        put32(patch, static_cast<std::uint32_t>(e.uncompressed));
    }
    RETEXO_ENSURE(::fseeko(f_, static_cast<off_t>(e.offset + 14), SEEK_SET) == 0, path_ << ": seek failed");
    put(patch.data(), patch.size());
    if (e.zip64) {
        std::string sizes;
        put64(sizes, e.uncompressed);
        put64(sizes, e.compressed);
        RETEXO_ENSURE(::fseeko(f_, static_cast<off_t>(e.offset + 30 + e.name.size() + 4), SEEK_SET) == 0,
                      path_ << ": seek failed");
        put(sizes.data(), sizes.size());
    }
    RETEXO_ENSURE(::fseeko(f_, end, SEEK_SET) == 0, path_ << ": seek failed");
    open_entry_ = false;
}

void npz_writer::close()
{
    RETEXO_ENSURE(f_ != nullptr && !open_entry_, path_ << ": npz_writer: close with an open entry or twice");
    const auto cd_offset = static_cast<std::uint64_t>(::ftello(f_));
    std::string cd;
    for (const auto& e : entries_) {
        const bool z64 = e.zip64 || e.offset >= max32 || e.compressed >= max32 || e.uncompressed >= max32;
        put32(cd, sig_central);
        put16(cd, z64 ? 45 : 20);
        put16(cd, z64 ? 45 : 20);
        put16(cd, 0);
        put16(cd, e.deflate ? 8 : 0);
        put16(cd, 0);
        put16(cd, dos_date);
        put32(cd, e.crc);
        put32(cd, z64 ? max32 : static_cast<std::uint32_t>(e.compressed));
        put32(cd, z64 ? max32 : static_cast<std::uint32_t>(e.uncompressed));
        put16(cd, static_cast<std::uint16_t>(e.name.size()));
        put16(cd, z64 ? 28 : 0);
        put16(cd, 0);
        put16(cd, 0);
        put16(cd, 0);
        put32(cd, 0);
        put32(cd, z64 ? max32 : static_cast<std::uint32_t>(e.offset));
        cd += e.name;
        if (z64) {
            put16(cd, 0x0001);
            put16(cd, 24);
            put64(cd, e.uncompressed);
            put64(cd, e.compressed);
            put64(cd, e.offset);
        }
    }
    put(cd.data(), cd.size());
    const std::uint64_t count = entries_.size(), cd_size = cd.size();
    const bool z64 = zip64_ || count >= max16 || cd_offset >= max32 || cd_size >= max32;
    std::string tail;
    if (z64) {
        const std::uint64_t z64_offset = cd_offset + cd_size;
        put32(tail, sig_zip64_eocd);
        put64(tail, 44);
        put16(tail, 45);
        put16(tail, 45);
        put32(tail, 0);
        put32(tail, 0);
        put64(tail, count);
        put64(tail, count);
        put64(tail, cd_size);
        put64(tail, cd_offset);
        put32(tail, sig_zip64_locator);
        put32(tail, 0);
        put64(tail, z64_offset);
        put32(tail, 1);
    }
    put32(tail, sig_eocd);
    put16(tail, 0);
    put16(tail, 0);
    put16(tail, z64 ? max16 : static_cast<std::uint16_t>(count));
    put16(tail, z64 ? max16 : static_cast<std::uint16_t>(count));
    put32(tail, z64 ? max32 : static_cast<std::uint32_t>(cd_size));
    put32(tail, z64 ? max32 : static_cast<std::uint32_t>(cd_offset));
    put16(tail, 0);
    put(tail.data(), tail.size());
    const int rc = std::fclose(f_);
    f_ = nullptr;
    RETEXO_ENSURE(rc == 0, path_ << ": close failed: " << std::strerror(errno));
    if (memory_out_ != nullptr) memory_out_->assign(memory_, memory_size_);
}

} // namespace retexo
