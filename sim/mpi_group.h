#pragma once
// One rank of `mpirun -n N pipescope ...` without linking MPI (libsimgrid exports the MPI API): the rank starts
// pipescope-mpi-relay (cli/mpi_relay_main.cc) as a child, which inherits the launcher's environment, joins the MPI
// job as this rank and carries all-gathers for it over pipes.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace pipescope::sim {

class MpiGroup {
 public:
  // The group when this process was started by Open MPI's mpirun with more than one rank
  // (OMPI_COMM_WORLD_SIZE > 1), else nullptr. `relay_exe`: the pipescope-mpi-relay program.
  static std::unique_ptr<MpiGroup> from_environment(const std::string& relay_exe);
  ~MpiGroup();
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every rank's `mine`, in rank order; every rank must call it the same number of times.
  std::vector<std::string> allgather(const std::string& mine);

 private:
  explicit MpiGroup(const std::string& relay_exe);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;  // the relay's stdin and stdout
  int rank_ = 0, size_ = 1;
};

}  // namespace pipescope::sim
