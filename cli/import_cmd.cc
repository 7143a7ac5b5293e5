// `pipescope import megatron [--name N] [--cluster PRESET] [--nodes N] [-o FILE] [--strict] -- <pretrain_gpt.py
// arguments>`: a Megatron-LM launch as a scenario YAML (core/model/megatron_import.h). `pipescope import torchtitan
// [CONFIG.toml] [--model PRESET] ... [-- --section.key value ...]`: a TorchTitan job configuration, as a TOML file or
// as its command-line keys (core/model/torchtitan_config.h). The YAML goes to stdout (or -o); what was not mapped is
// listed on stderr and as comments in the file.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/model/launch_script.h"
#include "core/model/megatron_import.h"
#include "core/model/torchtitan_config.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"

namespace pipescope::cli {
namespace {

struct ImportOptions {
  MegatronImportOptions megatron;
  std::string script;  // import megatron --script: the launch script whose pretrain_*.py line is read
  TorchTitanImportOptions torchtitan;
  std::string toml;  // import torchtitan: the job's TOML file
  std::vector<std::string> args;
  std::string out;
  bool strict = false;
};

void list(const char* what, const std::vector<std::string>& v) {
  if (v.empty()) return;
  std::fprintf(stderr, "%s (%zu):\n", what, v.size());
  for (const auto& x : v) std::fprintf(stderr, "  %s\n", x.c_str());
}

// What an import made and what it left, printed and written the same way for every tool.
template <class Import>
int finish_import(const ImportOptions& o, const Import& r) {
  list("unknown arguments, not mapped", r.unknown);
  list("not modelled", r.unsupported);
  list("ignored (no effect on an iteration's time)", r.ignored);
  // --strict refuses before anything is written: no scenario of a launch it could not represent.
  if (o.strict && (!r.unknown.empty() || !r.unsupported.empty()))
    throw InputError("--strict: " + std::to_string(r.unknown.size()) + " unknown and " +
                     std::to_string(r.unsupported.size()) + " unmodelled arguments (listed above); nothing written");
  if (o.out.empty() || o.out == "-") {
    std::cout << r.yaml;
  } else {
    write_file_atomic(o.out, r.yaml, "-o");  // a write error is the environment's (exit 3)
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
  return 0;
}

int run_import_megatron(const ImportOptions& o) {
  std::vector<std::string> args;
  if (!o.script.empty()) {  // the script's pretrain_*.py arguments, then any given after --
    const LaunchScript ls = read_launch_script(read_input_file(o.script, "launch script"), o.script);
    std::fprintf(stderr, "%s:%d: the pretrain command, %zu arguments\n", o.script.c_str(), ls.line, ls.args.size());
    list("left as written (not set in the script: positional parameters, the environment, substitutions)",
         ls.unresolved);
    args = ls.args;
  }
  args.insert(args.end(), o.args.begin(), o.args.end());
  if (args.empty()) throw InputError("import megatron: give --script FILE or the pretrain_gpt.py arguments after --");
  if (!o.out.empty() && o.out != "-") check_output_paths({{"-o", o.out}});
  return finish_import(o, import_megatron(args, o.megatron));
}

int run_import_torchtitan(const ImportOptions& o) {
  // After --, CLI11 hands the first word to the file's positional: a flag there is the first of the flags.
  std::vector<std::string> args = o.args;
  std::string toml = o.toml;
  if (toml.rfind("--", 0) == 0) args.insert(args.begin(), toml), toml.clear();
  if (toml.empty() == args.empty())
    throw InputError("import torchtitan: give the job's TOML file or its --section.key flags after --, one of them");
  if (!o.out.empty() && o.out != "-") check_output_paths({{"-o", o.out}});
  if (args.empty())
    return finish_import(o,
                         import_torchtitan_toml(read_input_file(toml, "TorchTitan configuration"), toml, o.torchtitan));
  return finish_import(o, import_torchtitan_flags(args, o.torchtitan));
}

}  // namespace

Command add_import(CLI::App& app) {
  auto* sub = app.add_subcommand("import", "Import another tool's configuration as a scenario YAML");
  sub->require_subcommand(1);
  auto o = std::make_shared<ImportOptions>();
  auto* mg = sub->add_subcommand("megatron", "A Megatron-LM pretrain_gpt.py command line (after --) as a scenario");
  mg->add_option("--name", o->megatron.name, "Scenario name")->capture_default_str();
  mg->add_option("--cluster", o->megatron.cluster, "Cluster preset (the launch's arguments do not say)")
      ->capture_default_str();
  mg->add_option("--nodes", o->megatron.nodes, "Nodes (default: enough for tp x pp, i.e. dp = 1)")
      ->check(CLI::Range(1, 1 << 20));
  mg->add_option("--script", o->script,
                 "A launch script: the arguments of its pretrain_*.py line, its shell variables expanded (then any "
                 "arguments after --)");
  mg->add_option("-o,--out", o->out, "Write the YAML to this file (default: stdout)");
  mg->add_flag("--strict", o->strict, "Exit 1 when an argument is unknown or not modelled");
  mg->add_option("args", o->args, "pretrain_gpt.py arguments, after --");
  auto* tt = sub->add_subcommand(
      "torchtitan", "A TorchTitan job configuration (a TOML file, or its --section.key flags after --) as a scenario");
  tt->add_option("config", o->toml, "The job's TOML file (TorchTitan's train_configs/*.toml)");
  tt->add_option("--name", o->torchtitan.name, "Scenario name")->capture_default_str();
  tt->add_option("--cluster", o->torchtitan.cluster, "Cluster preset (the configuration does not say)")
      ->capture_default_str();
  tt->add_option("--nodes", o->torchtitan.nodes, "Nodes (default: enough for one replicate x shard x tp x cp x pp)")
      ->check(CLI::Range(1, 1 << 20));
  tt->add_option("--model", o->torchtitan.model, "Model preset, in place of [model] name and flavor");
  tt->add_option("-o,--out", o->out, "Write the YAML to this file (default: stdout)");
  tt->add_flag("--strict", o->strict, "Exit 1 when a key is unknown or not modelled");
  tt->add_option("args", o->args, "--section.key value flags, after --");
  return {sub, [o, tt] { return tt->parsed() ? run_import_torchtitan(*o) : run_import_megatron(*o); }};
}

}  // namespace pipescope::cli
