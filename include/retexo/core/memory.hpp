#pragma once
/// @file memory.hpp
/// Handing freed memory back to the operating system between phases of a run.

namespace retexo {

/// Returns the heap's free pages to the operating system (glibc: malloc_trim; elsewhere
/// nothing).  Between the stages of a run the large buffers of the one before are freed
/// in the middle of the heap, where the allocator keeps them: without this, a process's
/// resident memory is the sum of its phases' peaks rather than the largest.
void release_free_memory() noexcept;

} // namespace retexo
