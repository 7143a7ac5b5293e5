#pragma once
// The host memory policy of CPU programs that time kernels or transfers (the CPU backend, the link benchmark):
// freed memory stays with the process, as a GPU framework's caching allocator keeps device blocks (see
// kernels/README.md "Host memory").

namespace pipescope::kernels {

// Idempotent and process-wide. By default glibc gives large freed blocks back to the kernel (munmap, heap
// trimming), so the next allocation of that size pays its page faults again.
void keep_freed_host_memory();

}  // namespace pipescope::kernels
