#include "server/session_api.h"

#include <nlohmann/json.hpp>

#include "server/json_body.h"
#include "server/json_fields.h"
#include "server/openai_api.h"
#include "server/request_fields.h"
#include "server/sampling_json.h"
#include "server/session_entry.h"

namespace rill::server {

using nlohmann::json;

SessionOptions parse_session_options(const ServingContext& ctx, const std::string& body_text) {
  const json b = parse_json_object(body_text, /*empty_is_object=*/true);
  if (has_field(b, "model")) {
    if (!b["model"].is_string()) bad_field("model", "must be a string");
    const std::string model = b["model"].get<std::string>();
    if (model != ctx.model().served_name)
      throw FieldError("model", "The model '" + model + "' does not exist", ErrorCode::kNotFound);
  }
  SessionOptions o;
  if (has_field(b, "id")) {
    if (!b["id"].is_string() || b["id"].get_ref<const std::string&>().empty())
      bad_field("id", "must be a non-empty string");
    o.id = b["id"].get<std::string>();  // its length and characters: create_session checks them
  }
  if (!has_field(b, "cache"))
    bad_field("cache", "is required: {\"policy\": \"streaming\", \"n_sink\", \"window\"}");
  o.cache = *parse_cache_field(b);
  o.sampling = ctx.model().sampling_defaults;  // as gRPC's from_pb(SessionOptions)
  parse_sampling_fields(b, o.sampling);
  if (has_field(b, "max_tokens"))
    o.max_tokens = static_cast<int>(get_int_field(b, "max_tokens", 0, kMaxTokensLimit));
  return o;
}

std::string session_body(const SessionInfo& info) {
  const std::shared_ptr<SessionEntry> entry = session_entry(info);
  const int64_t created = entry ? entry->created() : 0;
  const SessionOptions& o = info.options;
  const json cache =
      o.cache.is_streaming()
          ? json{{"policy", "streaming"}, {"n_sink", o.cache.n_sink}, {"window", o.cache.window}}
          : json{{"policy", "full"}};
  json defaults = sampling_json(o.sampling);
  defaults["max_tokens"] = o.max_tokens;
  return dump_json({{"id", o.id},
                    {"object", "session"},
                    {"created", created},
                    {"cache", cache},
                    {"turns", info.turns},
                    {"tokens_seen", info.tokens_seen},
                    {"tokens_evicted", info.tokens_evicted},
                    {"tokens_cached", info.tokens_cached},
                    {"turn_running", info.turn_running},
                    {"residence", session_residence_name(info.residence)},
                    {"idle_s", info.idle_s},
                    {"defaults", defaults}});
}

std::string session_deleted_body(const std::string& id) {
  return dump_json({{"id", id}, {"object", "session"}, {"deleted", true}});
}

}  // namespace rill::server
