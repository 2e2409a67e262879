// A synchroniser's options, declared once (name, type, range, default, help)
// in its description: from the declarations come the trainer's flags and
// --help, the checks of each value (one message naming the option), the
// ranks' agreement on them, config.json, `train --list_syncs` and the keyword
// arguments of ringlab_torch.Synchronizer.
#ifndef RINGLAB_SYNC_OPTIONS_H_
#define RINGLAB_SYNC_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace ringlab::sync {

// The most steps a run may take (1e9 epochs of at most 1e9 steps): step
// numbers and settings counted in steps stay far below 2^63.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000'000'000;

enum class OptionType { kInt, kFloat, kBool, kChoice };
const char* OptionTypeName(OptionType type);  // "int", "float", "bool", …

struct OptionSpec {
  std::string name;  // the flag's name, without dashes
  OptionType type = OptionType::kInt;
  std::string default_text;  // as a flag would be given
  std::string help;
  // kInt: [int_min, int_max]. kFloat: from float_min to float_max, each end
  // open where said (a float is also refused when not finite).
  int64_t int_min = 0, int_max = 0;
  double float_min = 0, float_max = 0;
  bool min_open = false, max_open = false;
  std::vector<std::string> choices;  // kChoice
};

OptionSpec IntOption(std::string name, int64_t default_value, int64_t min,
                     int64_t max, std::string help);
OptionSpec FloatOption(std::string name, double default_value, double min,
                       bool min_open, double max, bool max_open,
                       std::string help);
OptionSpec BoolOption(std::string name, bool default_value, std::string help);
OptionSpec ChoiceOption(std::string name, std::string default_value,
                        std::vector<std::string> choices, std::string help);

// The elements a share option (in (0, 1]: topk_ratio, sparta_p, ...) keeps
// of `count`: rounded up, at least one of a non-empty count.
size_t CountOfShare(double share, size_t count);

// Two declarations of one name (synchronisers sharing an option, as
// param_avg and post_local_sgd share avg_period) must be the same but for the
// help.
bool SameOption(const OptionSpec& a, const OptionSpec& b);

// "[1, 1000000000000000000]", "(0, 1e+06]", "rank or host", "true or false".
std::string DescribeRange(const OptionSpec& spec);

using OptionValue = std::variant<int64_t, double, bool, std::string>;

// The values of one synchroniser's options: each declared option has one.
class OptionValues {
 public:
  // Every option at its default.
  explicit OptionValues(const std::vector<OptionSpec>& specs);
  OptionValues() = default;

  // Parses `text` as the option's value. Throws std::invalid_argument
  // ("--name must be in [1, 10], not 0") for a value out of its range or not
  // of its type, std::out_of_range for a name not declared here.
  void Set(const std::string& name, const std::string& text);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  int64_t Int(const std::string& name) const;
  double Float(const std::string& name) const;
  bool Bool(const std::string& name) const;
  const std::string& Choice(const std::string& name) const;
  // The value as a flag would give it, exactly (a float's shortest text
  // that reads back to it).
  std::string Text(const std::string& name) const;
  const std::map<std::string, OptionValue>& values() const { return values_; }
  const std::vector<OptionSpec>& specs() const { return specs_; }

 private:
  const OptionSpec& Spec(const std::string& name) const;
  std::vector<OptionSpec> specs_;
  std::map<std::string, OptionValue> values_;
};

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_OPTIONS_H_
