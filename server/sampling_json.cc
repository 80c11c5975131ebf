#include "server/sampling_json.h"

#include <charconv>
#include <filesystem>

#include "engine/error.h"

namespace rill::server {
namespace {

using nlohmann::json;

// A float member's value as the double its shortest text reads back as.
double float_json_value(double stored) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(stored));
  double out = stored;
  std::from_chars(buf, r.ptr, out);
  return out;
}

json value_json(const SamplingField& f, const SamplingNumber& v) {
  switch (sampling_field_type(f)) {
    case SamplingFieldType::kFloat:
      return float_json_value(std::get<double>(v));
    case SamplingFieldType::kInt32:
      return static_cast<int64_t>(std::get<double>(v));
    case SamplingFieldType::kUint64:
      return std::get<uint64_t>(v);
  }
  return nullptr;
}

}  // namespace

SamplingNumber sampling_json_number(const json& v, const SamplingField& f,
                                    const std::string& field) {
  const bool integral = sampling_field_type(f) != SamplingFieldType::kFloat;
  if (!v.is_number())
    throw FieldError(field, "'" + field + "' must be " + (integral ? "an integer" : "a number"));
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return v.get<int64_t>();
  return v.get<double>();
}

void parse_sampling_fields(const json& body, SamplingParams& s) {
  for (const SamplingField& f : sampling_fields()) {
    const auto it = body.find(f.name);
    if (it == body.end() || it->is_null()) continue;  // OpenAI clients send null for "unset"
    set_sampling_field(s, f, sampling_json_number(*it, f, f.name));
  }
}

json sampling_json(const SamplingParams& s) {
  json j = json::object();
  for (const SamplingField& f : sampling_fields())
    j[f.name] = value_json(f, get_sampling_field(s, f));
  return j;
}

SamplingOverrides sampling_overrides_from_json(const json& j, const std::string& where) {
  if (!j.is_object())
    throw FieldError(where, "'" + where + "' must be an object of sampling fields");
  SamplingOverrides o;
  for (const auto& [key, value] : j.items()) {
    const std::string field = where + "." + key;
    const SamplingField* f = find_sampling_field(key);
    if (!f) throw FieldError(field, "'" + field + "' is not a sampling field");
    try {
      o.set(*f, sampling_json_number(value, *f, key));
    } catch (const FieldError& e) {
      // The table's message names the bare field ("'top_p' must be ..."); name its place.
      throw FieldError(field, "'" + field + "'" + std::string(e.what()).substr(key.size() + 2));
    }
  }
  return o;
}

json sampling_overrides_json(const SamplingOverrides& o) {
  json j = json::object();
  for (const SamplingField& f : sampling_fields())
    if (o.has(f)) j[f.name] = value_json(f, get_sampling_field(o.values(), f));
  return j;
}

SamplingParams server_sampling_defaults(const std::string& generation_config,
                                        const SamplingOverrides& server,
                                        const GenerationDefaults& model) {
  if (generation_config == "auto") return resolve_sampling_defaults(server, model.sampling);
  if (generation_config == "none") return resolve_sampling_defaults(server, {});
  std::filesystem::path file = generation_config;
  if (std::filesystem::is_directory(file)) file /= "generation_config.json";
  if (!std::filesystem::is_regular_file(file))
    throw Error(ErrorCode::kNotFound, "generation_config: " + file.string() +
                                          ": no such file (auto, none, a file or a directory)");
  return resolve_sampling_defaults(server, load_generation_config(file).sampling);
}

}  // namespace rill::server
