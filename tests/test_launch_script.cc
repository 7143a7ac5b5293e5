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
#include "core/model/megatron_import.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

std::string example() {
  std::ifstream f(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/megatron-launch/gpt3_175b.sh");
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
}

}  // namespace
}  // namespace pipescope
