#include "core/config.h"

namespace pipescope {

// These spellings are the YAML values (core/scenario.cc parses them) and the CLI's --compare names.
const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved:
      return "interleaved";
    case ScheduleKind::TeraPipe:
      return "terapipe";
    case ScheduleKind::Seq1F1B:
      return "seq1f1b";
    case ScheduleKind::Seq1F1BInterleaved:
      return "seq1f1b-i";
  }
  return "?";
}

const char* to_string(IntraNodeFabric f) {
  switch (f) {
    case IntraNodeFabric::NVSwitch:
      return "nvswitch";
    case IntraNodeFabric::CubeMesh:
      return "cube-mesh";
    case IntraNodeFabric::PCIe:
      return "pcie";
  }
  return "?";
}

const char* to_string(InterNodeTopology t) {
  switch (t) {
    case InterNodeTopology::Star:
      return "star";
    case InterNodeTopology::FatTree:
      return "fat-tree";
    case InterNodeTopology::Rail:
      return "rail";
  }
  return "?";
}

}  // namespace pipescope
