#include "cli/flags.h"

#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ringlab::cli {
namespace {

bool IsHelp(const std::string& name) {
  return name == "help" || name == "helpfull" || name == "helpshort" ||
         name == "h";
}

// gflags' own flags act on their own (reading files or the environment,
// exiting with status 1): not part of ringlab's command lines.
bool IsGflagsBuiltin(const std::string& name) {
  for (const char* builtin :
       {"flagfile", "fromenv", "tryfromenv", "undefok", "version", "helpxml",
        "helpon", "helpmatch", "helppackage"}) {
    if (name == builtin) return true;
  }
  return false;
}

bool PassedThrough(const std::string& arg,
                   const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes) {
    if (arg.rfind(p, 0) == 0) return true;
  }
  return false;
}

// Sets one flag from argv[*i] (and argv[*i + 1] for "--name value").
void SetFlag(int argc, char** argv, int* i) {
  const std::string arg = argv[*i];
  std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
  const size_t equals = body.find('=');
  std::string name = body.substr(0, equals);
  const bool has_value = equals != std::string::npos;
  std::string value = has_value ? body.substr(equals + 1) : "";
  if (IsGflagsBuiltin(name)) {
    ExitWithUsageError("--" + name + " is not supported (see --help)");
  }
  gflags::CommandLineFlagInfo info;
  if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
    // --noflag for a boolean --flag.
    if (!has_value && name.rfind("no", 0) == 0 &&
        gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) &&
        info.type == "bool") {
      name = name.substr(2);
      value = "false";
    } else {
      ExitWithUsageError("unknown flag --" + name + " (see --help)");
    }
  } else if (!has_value) {
    if (info.type == "bool") {
      value = "true";
    } else if (*i + 1 < argc) {
      value = argv[++*i];
    } else {
      ExitWithUsageError("flag --" + name + " needs a value");
    }
  }
  if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
    ExitWithUsageError("invalid value '" + value + "' for --" + name +
                       " (expected " + info.type + ")");
  }
}

// gflags' --help restricted to the flags defined under any of `dirs` (its
// own restriction takes one).
void ShowHelp(const char* argv0, const std::vector<std::string>& dirs) {
  std::printf("%s: %s\n", argv0, gflags::ProgramUsage());
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // by file, then name
  std::string file;
  for (const gflags::CommandLineFlagInfo& flag : flags) {
    bool shown = false;
    for (const std::string& dir : dirs) {
      shown = shown || flag.filename.find(dir) != std::string::npos;
    }
    if (!shown) continue;
    if (flag.filename != file) {
      file = flag.filename;
      std::printf("\n  Flags from %s:\n", file.c_str());
    }
    std::printf("%s", gflags::DescribeOneFlag(flag).c_str());
  }
}

// `bazel run` starts a binary inside its runfiles tree and names the directory
// the command was typed in: a relative path the user gives (--out_dir=run) is
// theirs, so the binary works from there, as it would run from bazel-bin.
void EnterTypedInDirectory() {
  const char* typed_in = std::getenv("BUILD_WORKING_DIRECTORY");
  if (typed_in != nullptr && *typed_in != '\0' && chdir(typed_in) != 0) {
    ExitWithUsageError(std::string("BUILD_WORKING_DIRECTORY=") + typed_in +
                       " cannot be entered");
  }
}

}  // namespace

std::vector<char*> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::vector<std::string>& help_dirs,
    const std::vector<std::string>& pass_through) {
  gflags::SetUsageMessage(usage);
  EnterTypedInDirectory();
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      ExitWithUsageError("unexpected argument '" + arg +
                         "' (flags look like --name=value)");
    }
    const size_t start = arg[1] == '-' ? 2 : 1;
    const std::string name = arg.substr(start, arg.find('=', start) - start);
    if (IsHelp(name)) {
      ShowHelp(argv[0], help_dirs);
      std::exit(0);
    }
    if (PassedThrough(arg, pass_through)) {
      rest.push_back(argv[i]);
      continue;
    }
    SetFlag(argc, argv, &i);
  }
  return rest;
}

}  // namespace ringlab::cli
