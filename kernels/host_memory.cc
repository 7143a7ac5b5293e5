#include "kernels/host_memory.h"

#include <malloc.h>

#include <mutex>

namespace pipescope::kernels {

// A pipeline's stash grows and shrinks within every iteration; with glibc's defaults each backward that
// allocated a record or a temporary above the mmap threshold faulted its pages in again, which the
// calibration's steady loop did not (gpipe pp2 at hidden 64: the runtime's backward 10-15% over the profile).
void keep_freed_host_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value; larger blocks are still mapped
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
  });
}

}  // namespace pipescope::kernels
