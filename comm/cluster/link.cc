#include "comm/cluster/link.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ringlab::comm::cluster {
namespace {

// A plain positive decimal ("2.5") followed by one of `units`; the value in
// the units' base, or -1 where the text is anything else.
double Scaled(const std::string& text,
              const std::pair<const char*, double>* units, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string unit = units[i].first;
    if (text.size() <= unit.size() ||
        text.compare(text.size() - unit.size(), unit.size(), unit) != 0) {
      continue;
    }
    const std::string number = text.substr(0, text.size() - unit.size());
    if (number.find_first_not_of("0123456789.") != std::string::npos ||
        number.front() == '.' || number.back() == '.' ||
        std::count(number.begin(), number.end(), '.') > 1) {
      return -1;
    }
    return std::strtod(number.c_str(), nullptr) * units[i].second;
  }
  return -1;
}

std::string Decimal(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

}  // namespace

std::string Link::Text() const {
  std::string text = "unlimited";
  if (!unlimited()) {
    const double b = static_cast<double>(bits_per_second);
    text = b >= 1e12  ? Decimal(b / 1e12) + "tbit"
           : b >= 1e9 ? Decimal(b / 1e9) + "gbit"
           : b >= 1e6 ? Decimal(b / 1e6) + "mbit"
                      : Decimal(b / 1e3) + "kbit";
  }
  if (latency_us > 0) {
    text += " + " + (latency_us % 1000 == 0
                         ? std::to_string(latency_us / 1000) + "ms"
                         : std::to_string(latency_us) + "us");
  }
  return text;
}

uint64_t Link::BurstBytes() const {
  return std::max<uint64_t>(128 << 10, bits_per_second / 8 / 1000);
}

Link ParseLink(const std::string& rate, const std::string& latency) {
  Link link;
  if (rate != "unlimited") {
    static const std::pair<const char*, double> kRates[] = {
        {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}};
    const double bits = Scaled(rate, kRates, 4);
    if (!(bits >= 1e6 && bits <= 1e12)) {
      throw std::invalid_argument(
          "--link must be unlimited or a rate from 1mbit to 1tbit in tc's "
          "units (e.g. 1gbit, 2.5gbit, 100mbit), got '" +
          rate + "'");
    }
    link.bits_per_second = static_cast<uint64_t>(std::llround(bits));
  }
  if (!latency.empty() && latency != "0") {
    static const std::pair<const char*, double> kTimes[] = {{"us", 1},
                                                            {"ms", 1e3}};
    const double us = Scaled(latency, kTimes, 2);
    if (!(us >= 1 && us <= 1e6)) {
      throw std::invalid_argument(
          "--link_latency must be a delay from 1us to 1000ms (e.g. 50us, "
          "2ms), got '" +
          latency + "'");
    }
    link.latency_us = static_cast<uint64_t>(std::llround(us));
  }
  return link;
}

}  // namespace ringlab::comm::cluster
