// pipescope-rank: the program each MPI rank of a measured run executes (see runtime/mpi_rank.h).
#include "runtime/mpi_rank.h"
#include "runtime/parent_watch.h"

int main(int argc, char** argv) {
  pipescope::runtime::exit_with_parent();
  return pipescope::runtime::rank_main(argc, argv);
}
