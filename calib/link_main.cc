// pipescope-linkbench: see link_mpi.cc.
#include "runtime/parent_watch.h"

namespace pipescope::calib {
int link_bench_main(int argc, char** argv);
}

int main(int argc, char** argv) {
  pipescope::runtime::exit_with_parent();  // header-only: no link dependency on runtime/
  return pipescope::calib::link_bench_main(argc, argv);
}
