#pragma once
// Schedules as files, in torch.distributed.pipelining's CSV format (PyTorch's _PipelineScheduleRuntime
// _load_csv / _dump_csv): one row per pipeline rank, one action per cell in execution order, an empty cell =
// idle. An action is `<stage><TYPE><microbatch>`: stage = the global virtual stage, TYPE one of F (forward),
// B (whole backward), I (backward for inputs), W (backward for weights), or, in the "compute_comms" form,
// SEND_F / RECV_F / SEND_B / RECV_B (SEND_F of stage s goes to RECV_F of stage s+1, SEND_B of stage s to RECV_B
// of stage s-1; none between two stages on the same rank). Numbers are 0-based.
//
// FSDP's actions (core/ir/shard_actions.h), as PyTorch writes them: `<stage>UNSHARD`, `<stage>RESHARD`,
// `<stage>REDUCE_GRAD` (no micro-batch), each before the next compute action of its row. A file that names them runs
// with training.fsdp and keeps them (Schedule::shard_actions); check_shard_actions has their rules.
//
// An overlapped pair (DualPipeV, core/ir/schedule.h Overlap) is one cell, as PyTorch writes it: "(a;b)OVERLAP_F_B",
// e.g. (0F5;3B2)OVERLAP_F_B, a forward and a backward of the rank run together.
//
// Extension for token / sequence slices (TeraPipe, Seq1F1B): `@<slice>` after the micro-batch, e.g. `0F3@1` is
// the forward of slice 1 of micro-batch 3 on stage 0. Written for every op of a micro-batch cut into more than
// one slice; without it an action means slice 0 and its micro-batch must be whole.
//
// Loading checks what PyTorch's validation checks and what a run needs, naming the rank and the cell
// (row = rank + 1, column = position in the row, both 1-based):
//   - malformed cells, a row count other than
//     pp, stages or micro-batches outside the scenario: std::invalid_argument (input error, exit 1);
//   - a stage on two ranks, a stage placement other than the IR's (loop: stage g on rank g % pp; V: rank r holds
//     stages r and 2 pp - 1 - r; a V file whose first m/2 micro-batches keep to stages 0..pp-1 and the others to
//     pp..2pp-1 is DualPipe's, StageStyle::Dual), a duplicated or
//     missing op, PyTorch's counts per stage (forwards = micro-batches (x slices), I count = W count,
//     B + (I + W) / 2 = micro-batches), a send without its receive or on the wrong rank, a send before its
//     producer or a receive after its consumer, a cycle (deadlock) among the ranks' orders, and FSDP actions that
//     break their rules (check_shard_actions, naming the rank and the action): CheckError
//     (schedule rejected, exit 2) naming the ops and their cells.
// The result then goes through the same lowering and static checker as a generated schedule.

#include <string>
#include <vector>

#include "core/ir/schedule.h"

namespace pipescope {

// What the scenario fixes and the file must match: pp ranks, v chunks per rank, the micro-batch table
// (with its token slices) and the sequence length.
struct CsvScheduleShape {
  int p = 1;
  int v = 1;
  std::vector<MicroBatch> microbatches;
  int seq_len = 0;
};

// Parses CSV text; `source` names the file in messages. The schedule's name is "file".
Schedule schedule_from_csv(const std::string& text, const std::string& source, const CsvScheduleShape& shape);
// Reads the file (std::invalid_argument when it cannot be read).
Schedule load_schedule_csv(const std::string& path, const CsvScheduleShape& shape);

// Where a file puts its virtual stages (V when stage pp sits on the last rank, Dual when such a file also keeps its
// micro-batches to DualPipe's two routes, else loop), read without checking the rest (the scenario loader needs it
// before the schedule is built). Throws std::invalid_argument when the file cannot be read.
StageStyle csv_stage_style(const std::string& path, int p);

// The compute-only CSV of a schedule (one row per rank, `@slice` on sliced micro-batches, FSDP's actions where the
// schedule names them); exact inverse of
// schedule_from_csv for every schedule whose stages follow the IR's layout.
std::string schedule_to_csv(const Schedule& s);

}  // namespace pipescope
