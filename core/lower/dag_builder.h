#pragma once
// build_dag (core/lower/dag.h) for callers that build many DAGs one after another: the DAG's and the build's vectors
// keep their capacity between builds, so a build writes memory that is already mapped instead of fresh pages (the
// replica copy and the collective rings are still allocated per build). Stage 2 of the search builds its shapes through
// the same steps without DagNodes (core/lower/dag_build.h, ShapeBuilder in core/plan/search_retime.h).

#include <memory>

#include "core/lower/dag.h"

namespace pipescope {

class DagBuilder {
 public:
  DagBuilder();
  ~DagBuilder();
  DagBuilder(const DagBuilder&) = delete;
  DagBuilder& operator=(const DagBuilder&) = delete;

  // The same DAG as build_dag(ls, placement) (same errors); valid until the next build.
  const Dag& build(const LoweredSchedule& ls, const Placement& placement);

  struct Scratch;  // core/lower/dag.cc

 private:
  std::unique_ptr<Scratch> scratch_;
  Dag dag_;
};

}  // namespace pipescope
