#include "sync/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ringlab::sync {
namespace {

std::string ShortestText(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

[[noreturn]] void Refuse(const OptionSpec& spec, const std::string& text) {
  throw std::invalid_argument(
      "--" + spec.name + " must be " +
      (spec.type == OptionType::kInt || spec.type == OptionType::kFloat ? "in "
                                                                        : "") +
      DescribeRange(spec) + ", not " + (text.empty() ? "empty" : text));
}

OptionValue Parse(const OptionSpec& spec, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  switch (spec.type) {
    case OptionType::kInt: {
      const long long v = std::strtoll(begin, &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE || v < spec.int_min ||
          v > spec.int_max) {
        Refuse(spec, text);
      }
      return static_cast<int64_t>(v);
    }
    case OptionType::kFloat: {
      const double v = std::strtod(begin, &end);
      const bool below =
          spec.min_open ? !(v > spec.float_min) : !(v >= spec.float_min);
      const bool above =
          spec.max_open ? !(v < spec.float_max) : !(v <= spec.float_max);
      if (text.empty() || *end != '\0' || !std::isfinite(v) || below || above) {
        Refuse(spec, text);
      }
      return v;
    }
    case OptionType::kBool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      Refuse(spec, text);
    case OptionType::kChoice:
      for (const std::string& choice : spec.choices) {
        if (text == choice) return text;
      }
      Refuse(spec, text);
  }
  throw std::logic_error("option type");
}

}  // namespace

const char* OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kInt:
      return "int";
    case OptionType::kFloat:
      return "float";
    case OptionType::kBool:
      return "bool";
    case OptionType::kChoice:
      return "choice";
  }
  return "?";
}

OptionSpec IntOption(std::string name, int64_t default_value, int64_t min,
                     int64_t max, std::string help) {
  OptionSpec spec{std::move(name), OptionType::kInt,
                  std::to_string(default_value), std::move(help)};
  spec.int_min = min;
  spec.int_max = max;
  return spec;
}

OptionSpec FloatOption(std::string name, double default_value, double min,
                       bool min_open, double max, bool max_open,
                       std::string help) {
  OptionSpec spec{std::move(name), OptionType::kFloat,
                  ShortestText(default_value), std::move(help)};
  spec.float_min = min;
  spec.float_max = max;
  spec.min_open = min_open;
  spec.max_open = max_open;
  return spec;
}

OptionSpec BoolOption(std::string name, bool default_value, std::string help) {
  return {std::move(name), OptionType::kBool, default_value ? "true" : "false",
          std::move(help)};
}

OptionSpec ChoiceOption(std::string name, std::string default_value,
                        std::vector<std::string> choices, std::string help) {
  OptionSpec spec{std::move(name), OptionType::kChoice,
                  std::move(default_value), std::move(help)};
  spec.choices = std::move(choices);
  return spec;
}

bool SameOption(const OptionSpec& a, const OptionSpec& b) {
  return a.name == b.name && a.type == b.type &&
         a.default_text == b.default_text && a.int_min == b.int_min &&
         a.int_max == b.int_max && a.float_min == b.float_min &&
         a.float_max == b.float_max && a.min_open == b.min_open &&
         a.max_open == b.max_open && a.choices == b.choices;
}

std::string DescribeRange(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kInt:
      return "[" + std::to_string(spec.int_min) + ", " +
             std::to_string(spec.int_max) + "]";
    case OptionType::kFloat:
      return std::string(spec.min_open ? "(" : "[") +
             ShortestText(spec.float_min) + ", " +
             ShortestText(spec.float_max) + (spec.max_open ? ")" : "]");
    case OptionType::kBool:
      return "true or false";
    case OptionType::kChoice: {
      std::string text;
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (i > 0) text += i + 1 == spec.choices.size() ? " or " : ", ";
        text += spec.choices[i];
      }
      return text;
    }
  }
  return "";
}

OptionValues::OptionValues(const std::vector<OptionSpec>& specs)
    : specs_(specs) {
  for (const OptionSpec& spec : specs_) {
    values_[spec.name] = Parse(spec, spec.default_text);
  }
}

const OptionSpec& OptionValues::Spec(const std::string& name) const {
  for (const OptionSpec& spec : specs_) {
    if (spec.name == name) return spec;
  }
  throw std::out_of_range("no option " + name);
}

void OptionValues::Set(const std::string& name, const std::string& text) {
  values_[name] = Parse(Spec(name), text);
}

int64_t OptionValues::Int(const std::string& name) const {
  return std::get<int64_t>(values_.at(name));
}
double OptionValues::Float(const std::string& name) const {
  return std::get<double>(values_.at(name));
}
bool OptionValues::Bool(const std::string& name) const {
  return std::get<bool>(values_.at(name));
}
const std::string& OptionValues::Choice(const std::string& name) const {
  return std::get<std::string>(values_.at(name));
}

std::string OptionValues::Text(const std::string& name) const {
  const OptionValue& value = values_.at(name);
  if (const auto* v = std::get_if<int64_t>(&value)) return std::to_string(*v);
  if (const auto* v = std::get_if<double>(&value)) return ShortestText(*v);
  if (const auto* v = std::get_if<bool>(&value)) return *v ? "true" : "false";
  return std::get<std::string>(value);
}

size_t CountOfShare(double share, size_t count) {
  if (count == 0) return 0;
  const auto k = static_cast<size_t>(std::ceil(share * count));
  return std::clamp<size_t>(k, 1, count);
}

}  // namespace ringlab::sync
