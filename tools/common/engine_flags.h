// Flags shared by the rill-* tools: model path, engine options, sampling and cache policy.
#pragma once

#include "engine/kv/cache_policy.h"
#include "engine/model/model.h"
#include "engine/runner/sampling.h"
#include "engine/runner_factory.h"
#include "tools/common/args.h"

namespace rill::cli {

/// Default model: the one embedded in the source tree.
std::string default_model_dir();

/// --model and every engine option of engine_option_table() (engine/runner/engine_options.h),
/// spelled and checked as the server's: the tools parse with Args, which builds where CLI11 is
/// not installed (the GPU host builds the tools with scripts/device/build_here.sh), but the
/// options, their spellings, ranges and messages are the server's (a bad value exits 2).
void add_engine_flags(Args& args);
EngineOptions engine_options(const Args& args);

/// One flag per row of sampling_fields() (--top-p for top_p), plus --greedy.
void add_sampling_flags(Args& args);
/// Flags override the model's generation_config.json defaults, which override OpenAI's (the
/// server's order without its override); --greedy forces temperature 0. A value out of range
/// exits 2 with the field's message.
SamplingParams sampling_params(const Args& args, const GenerationDefaults& defaults);

void add_cache_flags(Args& args);
CachePolicy cache_policy(const Args& args);

}  // namespace rill::cli
