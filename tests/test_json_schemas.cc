// Every machine-readable output against its JSON Schema in docs/schemas/: simulate, --compare, plan, repro terapipe
// and validate, each run by the built pipescope. The checker covers the keywords those files use.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;
const std::string kSchemas = std::string(PIPESCOPE_SOURCE_DIR) + "/docs/schemas/";

Json load(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return Json::parse(f);
}

bool type_is(const Json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "null") return v.is_null();
  return false;
}

// Appends "<path>: <problem>" for every violation.
void check(const Json& v, const Json& schema, const std::string& path, std::vector<std::string>& problems) {
  if (schema.contains("$ref")) return check(v, load(kSchemas + schema["$ref"].get<std::string>()), path, problems);
  if (schema.contains("const") && v != schema["const"])
    problems.push_back(path + ": " + v.dump() + " is not " + schema["const"].dump());
  if (schema.contains("type") && !type_is(v, schema["type"].get<std::string>())) {
    problems.push_back(path + ": " + v.dump().substr(0, 60) + " is not of type " + schema["type"].get<std::string>());
    return;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (schema.contains("minimum") && x < schema["minimum"].get<double>())
      problems.push_back(path + ": " + v.dump() + " < minimum " + schema["minimum"].dump());
    if (schema.contains("exclusiveMinimum") && !(x > schema["exclusiveMinimum"].get<double>()))
      problems.push_back(path + ": " + v.dump() + " <= exclusiveMinimum " + schema["exclusiveMinimum"].dump());
  }
  if (v.is_object()) {
    for (const auto& k : schema.value("required", Json::array()))
      if (!v.contains(k.get<std::string>())) problems.push_back(path + ": missing required key " + k.dump());
    const Json props = schema.value("properties", Json::object());
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k))
        check(x, props[k], path + "." + k, problems);
      else if (schema.contains("additionalProperties"))
        check(x, schema["additionalProperties"], path + "." + k, problems);
    }
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<std::size_t>())
      problems.push_back(path + ": fewer than " + schema["minItems"].dump() + " items");
    if (schema.contains("items"))
      for (std::size_t i = 0; i < v.size(); i++)
        check(v[i], schema["items"], path + "[" + std::to_string(i) + "]", problems);
  }
}

// Runs `pipescope ARGS` (which writes `out`) and checks `out` against docs/schemas/<schema>.
void run_and_check(const std::string& args, const std::string& out, const std::string& schema) {
  std::remove(out.c_str());
  const std::string cmd = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope " + args + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json doc = load(out);
  std::vector<std::string> problems;
  check(doc, load(kSchemas + schema), "$", problems);
  for (const auto& p : problems) ADD_FAILURE() << schema << ": " << p;
}

std::string tmp(const std::string& name) { return std::string(PIPESCOPE_BINARY_DIR) + "/tests/schema_" + name; }
std::string src(const std::string& p) { return std::string(PIPESCOPE_SOURCE_DIR) + "/" + p; }

TEST(JsonSchema, CheckerFindsMissingAndMistypedKeys) {
  std::vector<std::string> problems;
  const Json schema = load(kSchemas + "simulate.schema.json");
  Json doc = {{"schema", "pipescope.simulate/2"}, {"gpus", "16"}};
  check(doc, schema, "$", problems);
  EXPECT_GT(problems.size(), 10u);  // most required keys missing
  bool mistyped = false;
  for (const auto& p : problems) mistyped = mistyped || p.find("$.gpus: \"16\" is not of type integer") == 0;
  EXPECT_TRUE(mistyped);
}

TEST(JsonSchema, Simulate) {
  run_and_check("simulate " + src("scenarios/seq1f1b-2.7b.yaml") + " --json " + tmp("simulate.json"),
                tmp("simulate.json"), "simulate.schema.json");
}

TEST(JsonSchema, Compare) {
  run_and_check("simulate --compare 1f1b,interleaved --json " + tmp("compare.json"), tmp("compare.json"),
                "compare.schema.json");
}

TEST(JsonSchema, Plan) {
  run_and_check("plan " + src("scenarios/terapipe/setting-9.yaml") + " --json " + tmp("plan.json"), tmp("plan.json"),
                "plan.schema.json");
}

TEST(JsonSchema, ReproTerapipe) {
  run_and_check("repro terapipe --settings 10 --json " + tmp("repro.json"), tmp("repro.json"),
                "repro-terapipe.schema.json");
}

TEST(JsonSchema, ReproMegatron) {
  run_and_check("repro megatron --rows 1,5 --no-ablation --json " + tmp("repro_megatron.json"),
                tmp("repro_megatron.json"), "repro-megatron.schema.json");
}

TEST(JsonSchema, ReproSeq1f1b) {
  run_and_check("repro seq1f1b --models 2.7b --json " + tmp("repro_seq1f1b.json"), tmp("repro_seq1f1b.json"),
                "repro-seq1f1b.schema.json");
}

TEST(JsonSchema, ReproVtrain) {
  run_and_check("repro vtrain --json " + tmp("repro_vtrain.json"), tmp("repro_vtrain.json"),
                "repro-vtrain.schema.json");
}

// Two quick sets: one that runs (pairs, a worst row) and one not modelled (every row skipped).
TEST(JsonSchema, Fidelity) {
  run_and_check("fidelity --set terapipe-table2,moe-h100 --json " + tmp("fidelity.json"), tmp("fidelity.json"),
                "fidelity.schema.json");
}

TEST(JsonSchema, Search) {
  run_and_check("search -q --schedules 1f1b,zb-v --micro-batch-sizes 1 --keep 3 --json " + tmp("search.json"),
                tmp("search.json"), "search.schema.json");
}

TEST(JsonSchema, Sweep) {
  // One impossible combination (pp 4 x tp 4 does not fill 16 GPUs with dp) among valid ones: rows of both kinds.
  run_and_check(
      "sweep --vary parallel.pp=2,4 --vary parallel.tp=2,4 --out " + tmp("sweep.csv") + " --json " + tmp("sweep.json"),
      tmp("sweep.json"), "sweep.schema.json");
}

TEST(JsonSchema, Validate) {
  setenv("ASAN_OPTIONS", "detect_leaks=0", 1);  // sanitizer builds: Open MPI's own leaks (tests/CMakeLists.txt)
  run_and_check(
      "validate --pp 2 --dp 1 --tp 1 --layers 4 --hidden 32 --heads 2 --vocab 64 --seq-len 16 "
      "--global-batch 4 --iterations 2 --warmup 0 --json " +
          tmp("validate.json"),
      tmp("validate.json"), "validate.schema.json");
}

}  // namespace
