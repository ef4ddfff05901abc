#pragma once
/// @file names.hpp
/// The names of enum values, written once per enum: next to each enum, a function
/// `names_of(E)` (found by argument-dependent lookup) returns its table: the noun used in
/// messages and the (value, name) pairs.  A value's first name is the one printed; later
/// ones are accepted aliases.  parse_name and name_of work for every enum with a table.
///
///     enum class colour { red, green };
///     constexpr name_table<colour, 2> names_of(colour)
///     {
///         return {"colour", {{{colour::red, "red"}, {colour::green, "green"}}}};
///     }
///     parse_name<colour>("blue", "--colour")  // throws "--colour: unknown colour 'blue' (expected red or green)"

#include <retexo/core/error.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace retexo {

template <typename E, std::size_t N>
struct name_table {
    std::string_view noun; ///< what a value is, for messages ("model", "optimizer")
    std::array<std::pair<E, std::string_view>, N> entries;
};

/// An enum with a name table.
template <typename E>
concept named_enum = std::is_enum_v<E> && requires(E e)
{
    names_of(e).entries;
};

/// The printed names of E's values, "a, b or c".
template <named_enum E>
std::string name_list()
{
    constexpr auto table = names_of(E{});
    std::string out;
    std::size_t count = 0, printed = 0;
    auto first_of_value = [&](std::size_t i) {
        for (std::size_t j = 0; j < i; ++j)
            if (table.entries[j].first == table.entries[i].first) return false;
        return true;
    };
    for (std::size_t i = 0; i < table.entries.size(); ++i)
        count += first_of_value(i) ? 1 : 0;
    for (std::size_t i = 0; i < table.entries.size(); ++i) {
        if (!first_of_value(i)) continue;
        if (printed > 0) out += printed + 1 == count ? " or " : ", ";
        out += table.entries[i].second;
        ++printed;
    }
    return out;
}

/// The value named `text`; throws "<option>: unknown <noun> '<text>' (expected ...)".
template <named_enum E>
E parse_name(std::string_view text, std::string_view option = {})
{
    constexpr auto table = names_of(E{});
    for (const auto& [value, name] : table.entries)
        if (name == text) return value;
    RETEXO_THROW((option.empty() ? std::string() : std::string(option) + ": ")
                 << "unknown " << table.noun << " '" << text << "' (expected " << name_list<E>() << ")");
}

/// The value named `text`, at compile time: a name not in E's table does not compile.  For
/// constant names, such as the defaults table's (retexo/defaults.hpp).
template <named_enum E>
consteval E named(std::string_view text)
{
    for (const auto& [value, name] : names_of(E{}).entries)
        if (name == text) return value;
    throw "retexo::named: not a name of this enum";
}

/// The name of a value (its first name in the table).
template <named_enum E>
std::string name_of(E value)
{
    constexpr auto table = names_of(E{});
    for (const auto& [v, name] : table.entries)
        if (v == value) return std::string(name);
    RETEXO_THROW("retexo::name_of: " << table.noun << " value " << static_cast<long long>(value) << " has no name");
}

} // namespace retexo
