// Handing freed heap back to the operating system between a run's phases.
#include <retexo/core/memory.hpp>

#include <cstdlib> // defines __GLIBC__ under glibc

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

} // namespace retexo
