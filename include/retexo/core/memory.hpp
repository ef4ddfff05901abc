#pragma once
/// @file memory.hpp
/// The memory a process may still take, and handing freed memory back to the operating
/// system between phases of a run.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace retexo {

/// Returns the heap's free pages to the operating system (glibc: malloc_trim; elsewhere
/// nothing).  Between the stages of a run the large buffers of the one before are freed
/// in the middle of the heap, where the allocator keeps them: without this, a process's
/// resident memory is the sum of its phases' peaks rather than the largest.
void release_free_memory() noexcept;

/// What this process could still allocate and touch before the kernel's out-of-memory killer
/// ends it, and who it shares that with.
struct memory_room {
    /// The node's available memory and free swap (Linux /proc/meminfo): shared by every
    /// process on the node.
    std::uint64_t node = 0;
    /// Where a memory cgroup (v1 or v2, as Slurm and containers set) at some level of this
    /// process's hierarchy has less room than that, the least of it (its limit less its
    /// anonymous memory): shared by the processes in `cgroup_path`, the level that has it.
    std::optional<std::uint64_t> cgroup;
    std::string cgroup_path;

    /// The least of the two.
    std::uint64_t bytes() const noexcept { return cgroup ? std::min(node, *cgroup) : node; }
};

/// This process's memory room; empty where it cannot be read (not Linux).
std::optional<memory_room> available_memory();

} // namespace retexo
