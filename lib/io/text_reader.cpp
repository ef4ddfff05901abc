// Line readers of plain or gzip text, from files or from memory, with file:line messages.
#include <retexo/io/text_reader.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <zlib.h>

namespace retexo {

text_reader::text_reader(std::string path, std::size_t buffer_bytes) : path_(std::move(path)), buf_(buffer_bytes)
{
    errno = 0;
    gzFile f = gzopen(path_.c_str(), "rb");
    RETEXO_ENSURE(f != nullptr, path_ << ": cannot open: " << (errno != 0 ? std::strerror(errno) : "zlib error"));
    gzbuffer(f, 1U << 20);
    gz_ = f;
}

namespace {

/// Added to zlib's message ("incorrect data check", "invalid block type", ...) on corrupt data.
constexpr const char* corrupt_note = " (the gzip data is corrupt)";

/// gzerror's message without the file name it starts with (the error names the file once).
std::string zlib_message(gzFile f, const std::string& path, int& code)
{
    std::string msg = gzerror(f, &code);
    if (msg.starts_with(path + ": ")) msg.erase(0, path.size() + 2);
    if (code == Z_DATA_ERROR) msg += corrupt_note;
    return msg;
}

bool gzip_magic(std::span<const char> bytes)
{
    return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1F &&
           static_cast<unsigned char>(bytes[1]) == 0x8B;
}

/// gzip data decoded as gzread decodes a file: members one after another, anything after the
/// last member ignored.  On corrupt data, or a member cut short (even at a line's end),
/// `error` gets zlib's message and the text decoded before it is returned.
std::string gunzip(std::span<const char> in, std::string& error)
{
    std::string out;
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        error = "zlib inflateInit2 failed";
        return out;
    }
    std::vector<char> block(std::size_t{16} << 10);
    bool member_done = false;
    while (true) {
        if (member_done) {
            if (!gzip_magic(in)) break; // the end, or trailing garbage
            inflateReset(&z);
            member_done = false;
        }
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
        z.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size(), 1U << 30));
        z.next_out = reinterpret_cast<Bytef*>(block.data());
        z.avail_out = static_cast<uInt>(block.size());
        const uInt given = z.avail_in;
        const int rc = inflate(&z, Z_NO_FLUSH);
        in = in.subspan(given - z.avail_in);
        out.append(block.data(), block.size() - z.avail_out);
        if (rc == Z_STREAM_END) {
            member_done = true;
        } else if (rc == Z_BUF_ERROR) { // no progress: the input ends inside a member
            error = "unexpected end of file";
            break;
        } else if (rc != Z_OK) {
            error = z.msg != nullptr ? z.msg : rc == Z_MEM_ERROR ? "out of memory" : "compressed data error";
            if (rc == Z_DATA_ERROR) error += corrupt_note;
            break;
        }
    }
    inflateEnd(&z);
    return out;
}

} // namespace

text_reader::text_reader(std::string name, std::span<const char> bytes, std::size_t buffer_bytes)
    : path_(std::move(name)), memory_(bytes)
{
    if (gzip_magic(bytes)) {
        inflated_ = gunzip(bytes, memory_error_);
        memory_ = inflated_;
    }
    buf_.resize(std::max<std::size_t>(std::min(buffer_bytes, memory_.size() + 1), 1));
}

text_reader::~text_reader()
{
    if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
}

int text_reader::read_memory(char* out, std::size_t n)
{
    n = std::min<std::size_t>(n, 1U << 30);
    // A read that reaches the corrupt data fails whole, as gzread's does (so a text shorter
    // than the buffer fails at the first read, as a file does).
    if (!memory_error_.empty() && n > memory_.size()) return -1;
    n = std::min(n, memory_.size());
    std::memcpy(out, memory_.data(), n);
    memory_ = memory_.subspan(n);
    return static_cast<int>(n);
}

bool text_reader::refill()
{
    if (eof_) return false;
    // Move the partial line to the front, grow if a single line fills the buffer.
    const std::size_t rest = end_ - begin_;
    if (begin_ > 0) std::memmove(buf_.data(), buf_.data() + begin_, rest);
    begin_ = 0;
    end_ = rest;
    if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
    std::string msg;
    int got = 0;
    if (gz_ != nullptr) {
        auto* f = static_cast<gzFile>(gz_);
        got = gzread(f, buf_.data() + end_, static_cast<unsigned>(buf_.size() - end_));
        int code = Z_OK;
        if (got < 0) msg = zlib_message(f, path_, code);
        if (got == 0) { // the end; or a member cut short, which gzread reports so
            msg = zlib_message(f, path_, code);
            if (code == Z_BUF_ERROR) got = -1;
        }
    } else {
        got = read_memory(buf_.data() + end_, buf_.size() - end_);
        if (got < 0) msg = memory_error_;
    }
    if (got < 0) RETEXO_THROW(path_ << ": read error after line " << line_no_ << ": " << msg);
    if (got == 0) {
        eof_ = true;
        return false;
    }
    end_ += static_cast<std::size_t>(got);
    return true;
}

bool text_reader::next(std::string_view& line)
{
    std::size_t scan = begin_;
    while (true) {
        const void* nl = std::memchr(buf_.data() + scan, '\n', end_ - scan);
        if (nl != nullptr) {
            const auto pos = static_cast<std::size_t>(static_cast<const char*>(nl) - buf_.data());
            line = std::string_view(buf_.data() + begin_, pos - begin_);
            begin_ = pos + 1;
            break;
        }
        scan = end_ - begin_; // offset of unscanned data after refill moves it to the front
        if (!refill()) {
            if (end_ == begin_) return false;
            // Last line without a newline.
            line = std::string_view(buf_.data() + begin_, end_ - begin_);
            begin_ = end_;
            break;
        }
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no_;
    return true;
}

std::vector<std::int64_t> read_integer_lines(const std::string& path)
{
    text_reader in(path);
    return read_integer_lines(in);
}

std::vector<std::int64_t> read_integer_lines(text_reader& in)
{
    std::vector<std::int64_t> values;
    std::string_view line;
    while (in.next(line)) {
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        values.push_back(parse_number<std::int64_t>(line, in.where()));
    }
    return values;
}

} // namespace retexo
