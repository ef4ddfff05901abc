#include <retexo/io/text_reader.hpp>

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

text_reader::~text_reader()
{
    if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
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
    auto* f = static_cast<gzFile>(gz_);
    const int got = gzread(f, buf_.data() + end_, static_cast<unsigned>(buf_.size() - end_));
    if (got < 0) {
        int code = 0;
        const char* msg = gzerror(f, &code);
        RETEXO_THROW(path_ << ": read error after line " << line_no_ << ": " << msg);
    }
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
    std::vector<std::int64_t> values;
    std::string_view line;
    while (in.next(line)) {
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        values.push_back(parse_number<std::int64_t>(line, in.where()));
    }
    return values;
}

} // namespace retexo
