// pipescope-rank: the program each MPI rank of a measured run executes (see runtime/mpi_rank.h).
#include "runtime/mpi_rank.h"

int main(int argc, char** argv) { return pipescope::runtime::rank_main(argc, argv); }
