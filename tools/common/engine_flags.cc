#include "tools/common/engine_flags.h"

#include <charconv>
#include <string>
#include <type_traits>
#include <variant>

#include "engine/error.h"
#include "engine/runner/sampling_fields.h"

namespace rill::cli {

std::string default_model_dir() { return RILL_DEFAULT_MODEL_DIR; }

namespace {

// The table's flags without their "--".
std::string bare(const char* flag) {
  return std::string(flag).substr(2);
}

std::string value_text(const EngineOption& o) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>)
          return *p;
        else if constexpr (std::is_same_v<T, bool>)
          return *p ? "on" : "off";
        else if constexpr (std::is_same_v<T, double>) {
          std::string t = std::to_string(*p);
          t.erase(t.find_last_not_of('0') + 1);
          if (t.back() == '.') t.pop_back();
          return t;
        } else
          return std::to_string(*p);
      },
      o.target);
}

}  // namespace

// Every engine option of the server, spelled as the server spells it (engine_options.h): the
// table's flags, a boolean's as a --x / --no-x pair.
void add_engine_flags(Args& a) {
  a.option("model", default_model_dir(), "Hugging Face model directory or llama2.c .bin");
  EngineOptions defaults;
  for (const EngineOption& o : engine_option_table(defaults)) {
    std::string help = o.help;
    if (o.range) help += " " + option_range_text(*o.range);
    if (std::holds_alternative<bool*>(o.target)) {
      a.flag(bare(o.flag), help + " (default: " + value_text(o) + ")");
      a.flag("no-" + bare(o.flag), "the opposite of --" + bare(o.flag));
      continue;
    }
    a.option(bare(o.flag), value_text(o), help);
  }
}

EngineOptions engine_options(const Args& a) {
  EngineOptions e;
  for (const EngineOption& o : engine_option_table(e)) {
    const std::string name = bare(o.flag);
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) {
            if (a.on(name)) *p = true;
            if (a.on("no-" + name)) *p = false;
          } else if constexpr (std::is_same_v<T, std::string>) {
            *p = a.get(name);
          } else if constexpr (std::is_same_v<T, double>) {
            *p = a.get_double(name);
          } else if constexpr (std::is_same_v<T, int>) {
            *p = a.get_int(name);
          } else {
            *p = a.get_int64(name);
          }
        },
        o.target);
    if (const std::string why = engine_option_problem(o); !why.empty())
      a.fail("--" + name + " " + why);
  }
  return e;
}

namespace {

// --top-p for top_p.
std::string flag_name(const SamplingField& f) {
  std::string name = f.name;
  for (char& c : name)
    if (c == '_') c = '-';
  return name;
}

// A flag's text as the number a client would send: integers exactly (a uint64 seed too).
SamplingNumber flag_number(const Args& a, const std::string& flag, const SamplingField& f) {
  if (sampling_field_type(f) == SamplingFieldType::kFloat) return a.get_double(flag);
  const std::string v = a.get(flag);
  const char* end = v.data() + v.size();
  int64_t i = 0;
  if (auto r = std::from_chars(v.data(), end, i); r.ec == std::errc() && r.ptr == end) return i;
  uint64_t u = 0;
  if (auto r = std::from_chars(v.data(), end, u); r.ec == std::errc() && r.ptr == end) return u;
  a.fail("--" + flag + " expects an integer, got '" + v + "'");
}

}  // namespace

void add_sampling_flags(Args& a) {
  for (const SamplingField& f : sampling_fields()) {
    const std::string fallback = format_sampling_number(default_sampling_value(f));
    const std::string source = f.in_generation_config
                                   ? "default: generation_config.json, else " + fallback
                                   : "default " + fallback;
    a.option(flag_name(f), "",
             std::string(f.doc) + "; " + sampling_range_text(f) + " (" + source + ")");
  }
  a.flag("greedy", "greedy decoding (temperature 0)");
}

SamplingParams sampling_params(const Args& a, const GenerationDefaults& d) {
  SamplingParams p = resolve_sampling_defaults({}, d.sampling);
  for (const SamplingField& f : sampling_fields()) {
    const std::string flag = flag_name(f);
    if (!a.given(flag)) continue;
    try {
      set_sampling_field(p, f, flag_number(a, flag, f));
    } catch (const FieldError& e) {
      a.fail("--" + flag + ": " + e.what());
    }
  }
  if (a.on("greedy")) p.temperature = 0.0f;
  return p;
}

void add_cache_flags(Args& a) {
  a.option("cache", "full", "KV-cache policy: full | streaming");
  a.option("sink", "4", "streaming: attention-sink tokens kept");
  a.option("window", "252", "streaming: most recent tokens kept");
}

CachePolicy cache_policy(const Args& a) {
  const std::string c = a.get("cache");
  if (c == "full") return CachePolicy::full();
  if (c == "streaming") return CachePolicy::streaming(a.get_int("sink"), a.get_int("window"));
  a.fail("--cache must be full or streaming, got '" + c + "'");
}

}  // namespace rill::cli
