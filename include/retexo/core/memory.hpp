#pragma once
/// @file memory.hpp
/// The memory a process may still take, and handing freed memory back to the operating
/// system between phases of a run.

#include <cstdint>
#include <optional>

namespace retexo {

/// Returns the heap's free pages to the operating system (glibc: malloc_trim; elsewhere
/// nothing).  Between the stages of a run the large buffers of the one before are freed
/// in the middle of the heap, where the allocator keeps them: without this, a process's
/// resident memory is the sum of its phases' peaks rather than the largest.
void release_free_memory() noexcept;

/// Bytes this process could still allocate and touch before the kernel's out-of-memory
/// killer ends it: the node's available memory and free swap (Linux /proc/meminfo), or less
/// where a memory cgroup (v1 or v2, as Slurm and containers set) has a lower limit at any
/// level of this process's hierarchy.  Empty where none of it can be read (not Linux).
std::optional<std::uint64_t> available_memory_bytes();

} // namespace retexo
