// pipescope-linkbench: see link_mpi.cc.
namespace pipescope::calib {
int link_bench_main(int argc, char** argv);
}

int main(int argc, char** argv) { return pipescope::calib::link_bench_main(argc, argv); }
