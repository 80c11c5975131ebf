#include "engine/grammar/json_formats.h"

#include <map>

namespace rill::grammar {

namespace {

const std::string kDate = R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))";
const std::string kTime =
    R"(([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))";
const std::string kHex4 = "[0-9a-fA-F]{1,4}";

std::string ipv6() {
  // Full form, or "::" standing for one or more groups: a:b::c (at most 7 groups written).
  std::string alts = "(" + kHex4 + ":){7}" + kHex4;
  for (int left = 0; left <= 7; ++left) {
    const int right_max = 7 - left;
    std::string l = left == 0 ? "" : "(" + kHex4 + ":){" + std::to_string(left - 1) + "}" + kHex4;
    std::string r = right_max == 0 ? ""
                                   : "(" + kHex4 + "(:" + kHex4 + "){0," +
                                         std::to_string(right_max - 1) + "})?";
    alts += "|" + l + "::" + r;
  }
  return alts;
}

}  // namespace

const std::string* format_regex(std::string_view name) {
  static const std::map<std::string, std::string, std::less<>> kFormats = {
      {"date", kDate},
      {"time", kTime},
      {"date-time", kDate + "[Tt]" + kTime},
      {"duration",
       R"(P([0-9]{1,9}W|([0-9]{1,9}Y)?([0-9]{1,9}M)?([0-9]{1,9}D)?(T([0-9]{1,9}H)?([0-9]{1,9}M)?([0-9]{1,9}S)?)?))"},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"email",
       R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,64}(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,64}){0,8}@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8})"},
      {"hostname",
       R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8})"},
      {"ipv4",
       R"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"},
      {"ipv6", ipv6()},
      {"uri", R"([A-Za-z][A-Za-z0-9+.-]{0,31}:[!#-\[\]-~]{1,2048})"},
  };
  const auto it = kFormats.find(name);
  return it == kFormats.end() ? nullptr : &it->second;
}

}  // namespace rill::grammar
