#include "server/serving_context.h"

#include <spdlog/spdlog.h>

#include "engine/serving/ids.h"
#include "server/error_mapping.h"

namespace rill::server {

ServingContext::ServingContext(ServerConfig config) : config_(std::move(config)) {}

void ServingContext::set_engine(ServingEngine* engine, ModelInfo info,
                                std::unique_ptr<ChatRenderer> chat) {
  info_ = std::move(info);
  chat_ = std::move(chat);
  engine_.store(engine, std::memory_order_release);
}

ServingEngine& ServingContext::require_engine() const {
  ServingEngine* e = engine();
  if (!e) throw Error(ErrorCode::kUnavailable, "the model is loading");
  if (draining()) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
  return *e;
}

std::string ServingContext::unhealthy_reason() const {
  const ServingEngine* e = engine();
  if (!e) return "loading";
  if (draining()) return "draining";
  const EngineStats s = e->stats();
  if (s.draining) return "draining";
  if (s.stalled) return "stalled";
  return {};
}

std::string ServingContext::new_request_id(const std::string& prefix) {
  return random_id(prefix);
}

std::vector<int32_t> ServingContext::encode_prompt(const std::string& text,
                                                   bool has_special_tokens) const {
  if (text.empty()) throw Error(ErrorCode::kInvalidArgument, "the prompt is empty");
  return require_engine().tokenizer().encode(text, !has_special_tokens);
}

void ServingContext::check_prompt(const std::vector<int32_t>& ids, const std::string& param) const {
  if (ids.empty()) throw FieldError(param, "'" + param + "': the prompt is empty");
  const int32_t vocab = require_engine().tokenizer().vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw FieldError(param, "'" + param + "': token id " + std::to_string(id) +
                                  " is out of range [0, " + std::to_string(vocab) + ")");
  const int limit =
      config_.max_prompt_tokens > 0 ? config_.max_prompt_tokens : info_.context_length;
  if (limit > 0 && static_cast<int64_t>(ids.size()) > limit)
    throw FieldError(param, "'" + param + "': the prompt has " + std::to_string(ids.size()) +
                                " tokens, over the limit of " + std::to_string(limit));
}

namespace {

// "met", "missed" or "-" (no target, or not judged).
const char* slo_word(const std::optional<bool>& met) {
  return !met ? "-" : *met ? "met" : "missed";
}

}  // namespace

void ServingContext::access_log(const AccessRecord& r) const {
  if (!config_.access_log) return;
  const SloOutcome& slo = r.timings.slo;
  spdlog::info(
      "access {} \"{}\" id={} status={} finish={} prompt_tokens={} completion_tokens={} "
      "queue_ms={:.1f} "
      "ttft_ms={:.1f} tpot_ms={:.2f} e2e_ms={:.1f} ttft_slo={} tpot_slo={}",
      r.protocol, r.method, r.request_id.empty() ? "-" : r.request_id, r.status,
      r.finish_reason.empty() ? "-" : r.finish_reason, r.prompt_tokens, r.completion_tokens,
      r.timings.queue_s * 1e3, r.timings.ttft_s * 1e3, r.timings.tpot_s * 1e3,
      r.timings.e2e_s * 1e3, slo_word(slo.ttft_met), slo_word(slo.tpot_met));
}

}  // namespace rill::server
