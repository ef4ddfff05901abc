// The hashes of core/hash.hpp that are not inline: a partition assignment's, and the
// hexadecimal form files and messages show.
#include <retexo/core/error.hpp>
#include <retexo/core/hash.hpp>

#include <iomanip>
#include <sstream>

namespace retexo {

std::uint64_t assignment_hash(std::span<const part_t> assignment, part_t parts)
{
    fnv1a h;
    h.feed(static_cast<std::uint32_t>(parts));
    h.feed(static_cast<std::uint32_t>(assignment.size()));
    for (part_t p : assignment)
        h.feed(static_cast<std::uint32_t>(p));
    return h.value();
}

std::string hash_to_hex(std::uint64_t h)
{
    std::ostringstream s;
    s << std::hex << std::setw(16) << std::setfill('0') << h;
    return s.str();
}

std::uint64_t hash_from_hex(const std::string& hex)
{
    RETEXO_ENSURE(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
                  "'" << hex << "' is not a 16-digit hexadecimal assignment hash");
    return std::stoull(hex, nullptr, 16);
}

} // namespace retexo
