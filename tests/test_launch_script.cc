// A launch script's pretrain_*.py arguments with its shell variables expanded (core/model/launch_script.h): the shipped
// example script, bash's rules for quotes, splitting, arrays, defaults and continuations, and what is left as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/launch_script.h"
#include "core/model/megatron_emit.h"
#include "core/model/megatron_import.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

std::string example(const std::string& name = "gpt3_175b.sh") {
  std::ifstream f(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/megatron-launch/" + name);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The value after `flag` in `args` ("" when absent).
std::string after(const std::vector<std::string>& args, const std::string& flag) {
  const auto it = std::find(args.begin(), args.end(), flag);
  return it == args.end() || it + 1 == args.end() ? "" : *(it + 1);
}

TEST(LaunchScript, TheShippedExample) {
  const LaunchScript ls = read_launch_script(example(), "gpt3_175b.sh");
  EXPECT_EQ(ls.line, 50);
  EXPECT_EQ(ls.args.front(), "--num-layers");
  EXPECT_EQ(after(ls.args, "--hidden-size"), "12288");
  EXPECT_EQ(after(ls.args, "--tensor-model-parallel-size"), "8");     // "$TP" inside a quoted string, split unquoted
  EXPECT_EQ(after(ls.args, "--pipeline-model-parallel-size"), "16");  // ${PP}
  EXPECT_EQ(after(ls.args, "--recompute-granularity"), "selective");  // quotes removed
  EXPECT_EQ(after(ls.args, "--attention-backend"), "auto");           // the array element's comment dropped
  EXPECT_EQ(after(ls.args, "--data-path"), "$4");                     // not set by the script: left as written
  EXPECT_EQ(after(ls.args, "--save"), "$1");
  EXPECT_EQ(ls.unresolved, (std::vector<std::string>{"$(($GPUS_PER_NODE*$NUM_NODES))", "$1", "$4"}));
  // Imported: the same scenario as the arguments written out.
  MegatronImportOptions o;
  o.nodes = 128;
  const Scenario s = parse_scenario(import_megatron(ls.args, o).yaml, "i.yaml");
  EXPECT_EQ(s.parallel.tp, 8);
  EXPECT_EQ(s.parallel.pp, 16);
  EXPECT_EQ(s.parallel.v, 3);       // 96 layers, 2 per virtual stage, pp 16
  EXPECT_EQ(s.model.vocab, 51200);  // 50257 padded to 128 x tp
  EXPECT_EQ(s.schedule.recompute, Recompute::Selective);
}

TEST(LaunchScript, BashExpansionRules) {
  const std::string script =
      "#!/bin/bash\n"
      "export A=\"1 2\"  # a comment\n"
      "B=x'$A'y\n"
      "ARR=(--p \"q r\"\n"
      "     --s ${A})\n"
      "python -u /opt/megatron/pretrain_gpt.py --one $A --two \"$A\" --three ${UNSET:-7} --four $B \\\n"
      "  \"${ARR[@]}\" --five '${A}' --six \\$A # trailing comment\n";
  const LaunchScript ls = read_launch_script(script, "t.sh");
  EXPECT_EQ(ls.line, 6);
  EXPECT_EQ(ls.args, (std::vector<std::string>{"--one", "1", "2", "--two", "1 2", "--three", "7", "--four", "x$Ay",
                                               "--p", "q r", "--s", "1", "2", "--five", "${A}", "--six", "$A"}));
  EXPECT_TRUE(ls.unresolved.empty());
}

// Tests bash evaluates from the script alone pick the branch it takes (nested, elif, else, [ ] and [[ ]], -z / -n,
// == / !=, || / &&, !); another test is taken as false and listed; appends to strings and arrays; `;` separates
// commands.
TEST(LaunchScript, BranchesAndAppends) {
  const std::string script =
      "MODE=fp8; EMPTY=\n"
      "ARGS=(--a 1)\n"
      "if [[ \"$MODE\" == \"fp8\" ]]; then\n"
      "  ARGS+=(\"--fp8-format hybrid\")\n"
      "  if [ -z \"$EMPTY\" ] && [[ $MODE != bf16 ]]; then ARGS+=(--inner); else ARGS+=(--wrong1); fi\n"
      "elif [[ -n \"$MODE\" ]]; then\n"
      "  ARGS+=(--wrong2)\n"
      "else\n"
      "  ARGS+=(--wrong3)\n"
      "fi\n"
      "if ! [[ $MODE == fp8 ]] || [[ $MODE == x ]]; then ARGS+=(--wrong4); elif [ \"$MODE\" ]; then ARGS+=(--elif); "
      "fi\n"
      "if [ -f /etc/hosts ]; then\n"
      "  ARGS+=(--file-test)\n"
      "fi\n"
      "V=a\n"
      "V+=b\n"
      "torchrun pretrain_gpt.py ${ARGS[@]} \"${ARGS[@]}\" --v $V\n";
  const LaunchScript ls = read_launch_script(script, "t.sh");
  EXPECT_EQ(ls.args, (std::vector<std::string>{"--a", "1", "--fp8-format", "hybrid", "--inner", "--elif", "--a", "1",
                                               "--fp8-format hybrid", "--inner", "--elif", "--v", "ab"}));
  EXPECT_EQ(ls.unresolved, (std::vector<std::string>{"if [ -f /etc/hosts ] (taken as false)"}));
}

// The Llama-3 8B FP8 example: its FP8 and data arguments appended under `if` tests, its data-parallel arguments
// appended to the training ones; imported with nothing that changes the time left out.
TEST(LaunchScript, TheLlamaExampleWithBranches) {
  const LaunchScript ls = read_launch_script(example("llama3_8b_fp8.sh"), "llama3_8b_fp8.sh");
  EXPECT_EQ(after(ls.args, "--fp8-format"), "hybrid");  // "--fp8-format hybrid", one element, split unquoted
  EXPECT_EQ(after(ls.args, "--vocab-size"), "128256");  // the mock-data branch
  EXPECT_EQ(std::count(ls.args.begin(), ls.args.end(), "--vocab-size"), 1);
  EXPECT_EQ(std::count(ls.args.begin(), ls.args.end(), "--data-path"), 0);  // the other branch
  EXPECT_NE(std::find(ls.args.begin(), ls.args.end(), "--use-distributed-optimizer"), ls.args.end());
  EXPECT_TRUE(ls.unresolved.empty());
  MegatronImportOptions o;
  o.cluster = "dgx-h100";
  o.nodes = 1;
  const MegatronImport r = import_megatron(ls.args, o);
  EXPECT_TRUE(r.unknown.empty());
  const Scenario s = parse_scenario(r.yaml, "i.yaml");
  EXPECT_EQ(s.training.dtype, "fp8");
  EXPECT_TRUE(s.training.distributed_optimizer);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_TRUE(s.training.overlap_param_gather);
  EXPECT_TRUE(s.training.flash_attention);  // --attention-backend fused
  EXPECT_EQ(s.model.vocab, 128256);
  EXPECT_EQ(s.parallel.dp, 8);
  // Not modelled, and said so: FP8 parameter gathers, the fused cross-entropy kernel.
  EXPECT_EQ(r.unsupported.size(), 2u);
  // Emitted and imported back: the same scenario.
  auto uncommented = [](const std::string& yaml) {
    std::istringstream in(yaml);
    std::string out, line;
    while (std::getline(in, line))
      if (line.rfind("#", 0) != 0) out += line.substr(0, line.find("  #")) + "\n";
    return out;
  };
  EXPECT_EQ(uncommented(import_megatron(megatron_arguments(s), o).yaml), uncommented(r.yaml));
}

TEST(LaunchScript, ErrorsNameTheLine) {
  auto message = [](const std::string& text) -> std::string {
    try {
      read_launch_script(text, "run.sh");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message("echo hi\nX=\"open\n"), "run.sh:2: unterminated \"");
  EXPECT_EQ(message("A=( --x 1\n"), "run.sh:1: array A=( ... has no closing )");
  EXPECT_EQ(message("echo no training here\n"), "run.sh: no line runs a pretrain_*.py script");
  EXPECT_EQ(message("X=1\nfi\n"), "run.sh:2: fi without if");
}

}  // namespace
}  // namespace pipescope
