// pipescope-mpi-relay: the MPI side of `mpirun -n N pipescope search`. libsimgrid exports the MPI API, so
// `pipescope` itself must not be an MPI program; under mpirun each pipescope rank starts this relay as a child
// (it inherits the launcher's environment, so it joins the job as that rank) and talks to it through pipes:
//   relay -> parent at start:  uint64 rank, uint64 size
//   parent -> relay:           uint64 length, bytes           (one contribution)
//   relay -> parent:           uint64 length, bytes per rank  (every rank's contribution, rank order)
// until the parent closes stdin; then MPI_Finalize. sim/mpi_group.h is the parent's side.
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

bool get(void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = read(STDIN_FILENO, c, n);
    if (k <= 0) return false;
    c += k, n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool put(const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = write(STDOUT_FILENO, c, n);
    if (k <= 0) return false;
    c += k, n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::uint64_t hello[2] = {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(size)};
  int ok = put(hello, sizeof hello) ? 1 : 0;
  for (;;) {
    // Every rank takes part in every round; a rank whose parent is done (or broken) says so, and all stop.
    std::uint64_t len = 0;
    std::string data;
    if (ok && get(&len, sizeof len)) {
      data.resize(len);
      ok = get(data.data(), len) ? 1 : 0;
    } else {
      ok = 0;
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) break;
    const int n = static_cast<int>(len);
    std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < size; r++)
      displs[static_cast<std::size_t>(r)] = total, total += counts[static_cast<std::size_t>(r)];
    std::string out(static_cast<std::size_t>(total), '\0');
    MPI_Allgatherv(data.data(), n, MPI_CHAR, out.data(), counts.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < size && ok; r++) {
      const std::uint64_t l = static_cast<std::uint64_t>(counts[static_cast<std::size_t>(r)]);
      ok = put(&l, sizeof l) && put(out.data() + displs[static_cast<std::size_t>(r)], l) ? 1 : 0;
    }
  }
  MPI_Finalize();
  return 0;
}
