// The sampling fields in JSON, derived from the one table (engine/runner/sampling_fields.h):
// request bodies (completions, chat, session create), the session object's "defaults" and the
// server's `default_sampling` override. Checks are the table's, so HTTP refuses exactly what
// gRPC and the tools refuse, with the same message.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/model/model.h"
#include "engine/runner/sampling_fields.h"

namespace rill::server {

/// A JSON number as the client sent it (integers exactly). Throws FieldError(field): "'field'
/// must be an integer" (int32 / uint64 fields) or "must be a number" for anything else.
SamplingNumber sampling_json_number(const nlohmann::json& v, const SamplingField& f,
                                    const std::string& field);

/// The sampling fields present (non-null) in `body` written over `s`, each checked.
void parse_sampling_fields(const nlohmann::json& body, SamplingParams& s);

/// Every field of `s` by name: {"temperature": 0.8, "top_k": 0, ..., "seed": 0}. Floats are
/// written as their shortest float text (0.8, not 0.800000011920929).
nlohmann::json sampling_json(const SamplingParams& s);

/// A server override ({"temperature": 0.7}): table fields only. Throws FieldError naming
/// "<where>.<key>" ("default_sampling.top_p") for an unknown key or a bad value.
SamplingOverrides sampling_overrides_from_json(const nlohmann::json& j, const std::string& where);
/// The fields set in `o`, as sampling_json writes them.
nlohmann::json sampling_overrides_json(const SamplingOverrides& o);

/// The sampling defaults of every request and session (ModelInfo::sampling_defaults):
/// `server` (default_sampling) over the generation config that `generation_config` names over
/// OpenAI's. "auto": `model` (the model directory's generation_config.json, loaded with it);
/// "none": no model defaults; else a generation_config.json file or a directory holding one
/// (throws kNotFound / kInvalidArgument naming it).
SamplingParams server_sampling_defaults(const std::string& generation_config,
                                        const SamplingOverrides& server,
                                        const GenerationDefaults& model);

}  // namespace rill::server
