#include "train/sync_flags.h"

#include <gflags/gflags.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "sync/synchronizer.h"

namespace ringlab::train {
namespace {

// The help of a flag: its owners, then the declaration's words and range.
std::string FlagHelp(const sync::OptionSpec& spec) {
  std::string help = sync::SyncsWithOption(spec.name) + ": " + spec.help;
  if (spec.type == sync::OptionType::kInt ||
      spec.type == sync::OptionType::kFloat) {
    help += " (in " + sync::DescribeRange(spec) + ")";
  }
  return help;
}

// gflags keeps the pointers it is given: names, help and storage live as
// long as the program.
template <typename T>
void Register(const sync::OptionSpec& spec, T value) {
  const char* name = (new std::string(spec.name))->c_str();
  const char* help = (new std::string(FlagHelp(spec)))->c_str();
  gflags::FlagRegisterer(name, help, "sync/ (each --sync's options)",
                         new T(value), new T(value));
}

}  // namespace

void RegisterSyncFlags() {
  for (const sync::OptionSpec& spec : sync::AllSyncOptions()) {
    const sync::OptionValues defaults({spec});
    switch (spec.type) {
      case sync::OptionType::kInt:
        Register<gflags::int64>(spec, defaults.Int(spec.name));
        break;
      case sync::OptionType::kFloat:
        Register<double>(spec, defaults.Float(spec.name));
        break;
      case sync::OptionType::kBool:
        Register<bool>(spec, defaults.Bool(spec.name));
        break;
      case sync::OptionType::kChoice:
        Register<std::string>(spec, defaults.Choice(spec.name));
        break;
    }
  }
}

sync::OptionValues SyncOptionsFromFlags(const std::string& name) {
  std::map<std::string, std::string> given;
  for (const sync::OptionSpec& spec : sync::AllSyncOptions()) {
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(spec.name.c_str(), &info) &&
        !info.is_default) {
      given[spec.name] = info.current_value;
    }
  }
  // Each value against its range first, so that a bad value is named as
  // such whichever synchroniser it belongs to.
  for (const auto& [option, text] : given) {
    for (const sync::OptionSpec& spec : sync::AllSyncOptions()) {
      if (spec.name == option) sync::OptionValues({spec}).Set(option, text);
    }
  }
  return sync::ParseSyncOptions(name, given);
}

std::string ListSyncs(const std::string& format) {
  if (format == "json") {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const sync::SyncDescription* d : sync::AllSyncs()) {
      nlohmann::ordered_json options = nlohmann::ordered_json::array();
      for (const sync::OptionSpec& spec : d->options) {
        nlohmann::ordered_json option = {
            {"name", spec.name},
            {"type", sync::OptionTypeName(spec.type)},
            {"default", spec.default_text},
            {"range", sync::DescribeRange(spec)},
            {"help", spec.help}};
        if (!spec.choices.empty()) option["choices"] = spec.choices;
        options.push_back(option);
      }
      all.push_back({{"name", d->name},
                     {"summary", d->summary},
                     {"sends", d->sends},
                     {"pytorch", d->pytorch},
                     {"reduces_grads", d->reduces.grads},
                     {"reduces_params", d->reduces.params},
                     {"options", options},
                     {"short_run", d->short_run}});
    }
    return all.dump(2) + "\n";
  }
  if (format != "text") {
    throw std::invalid_argument("--list_syncs must be text or json, not " +
                                format);
  }
  std::string text;
  for (const sync::SyncDescription* d : sync::AllSyncs()) {
    text += d->name + ": " + d->summary + "\n    sends " + d->sends +
            "\n    PyTorch: " + d->pytorch + "\n";
    for (const sync::OptionSpec& spec : d->options) {
      text += "    --" + spec.name + "=" + spec.default_text + "  " +
              sync::OptionTypeName(spec.type) + ", " +
              sync::DescribeRange(spec) + ": " + spec.help + "\n";
    }
  }
  return text;
}

}  // namespace ringlab::train
