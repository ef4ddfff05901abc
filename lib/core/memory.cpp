// The memory a process may still take; handing freed heap back between a run's phases.
#include <retexo/core/memory.hpp>

#include <algorithm>
#include <cstdlib> // defines __GLIBC__ under glibc
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace retexo {

void release_free_memory() noexcept
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

namespace {

/// The first number in a file ("max" or anything else unreadable: empty).
std::optional<std::uint64_t> read_number(const std::filesystem::path& file)
{
    std::ifstream in(file);
    std::uint64_t v = 0;
    if (in >> v) return v;
    return std::nullopt;
}

/// The number after `key` on its line of a "key value" file (/proc/meminfo: "Key: N kB";
/// a cgroup's memory.stat: "key N").
std::optional<std::uint64_t> field(const std::filesystem::path& file, const std::string& key)
{
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with(key + " ") || line.starts_with(key + ":")) {
            std::istringstream fields(line.substr(key.size() + 1));
            std::uint64_t v = 0;
            if (fields >> v) return v;
        }
    return std::nullopt;
}

/// The least headroom of the cgroup at `leaf` under `mount` and of its parents (the mount's
/// root included), and the level that has it: its limit less its anonymous memory (the page
/// cache it also counts is reclaimed before anything is killed).
std::optional<std::pair<std::uint64_t, std::string>> cgroup_headroom(const std::filesystem::path& mount,
                                                                     std::filesystem::path leaf, const char* limit_file,
                                                                     const char* anon_key)
{
    std::optional<std::pair<std::uint64_t, std::string>> least;
    for (;;) {
        const auto dir = mount / leaf.relative_path();
        const auto limit = read_number(dir / limit_file);
        const auto usage = field(dir / "memory.stat", anon_key);
        if (limit && usage) {
            const std::uint64_t room = *limit > *usage ? *limit - *usage : 0;
            if (!least || room < least->first) least.emplace(room, dir.string());
        }
        if (!leaf.has_relative_path()) return least;
        leaf = leaf.parent_path();
    }
}

} // namespace

std::optional<memory_room> available_memory()
{
    const auto available = field("/proc/meminfo", "MemAvailable");
    if (!available) return std::nullopt;
    memory_room r;
    r.node = (*available + field("/proc/meminfo", "SwapFree").value_or(0)) * 1024; // kB
    // /proc/self/cgroup: "0::/path" (v2), "N:memory:/path" or "N:...,memory,...:/path" (v1).
    std::ifstream groups("/proc/self/cgroup");
    std::string line;
    while (std::getline(groups, line)) {
        const auto a = line.find(':');
        const auto b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
        const std::filesystem::path leaf = line.substr(b + 1);
        std::optional<std::pair<std::uint64_t, std::string>> room;
        if (line.starts_with("0::"))
            room = cgroup_headroom("/sys/fs/cgroup", leaf, "memory.max", "anon");
        else if (controllers.find(",memory,") != std::string::npos)
            room = cgroup_headroom("/sys/fs/cgroup/memory", leaf, "memory.limit_in_bytes", "total_rss");
        if (room && room->first < r.bytes()) {
            r.cgroup = room->first;
            r.cgroup_path = room->second;
        }
    }
    return r;
}

} // namespace retexo
