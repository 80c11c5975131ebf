// What both front ends share: the engine (absent while the model loads), the model's
// description, the chat renderer, the served name, limits, health and the access log. Each
// front end only translates its protocol to and from rill::Request / RequestEvent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/serving/serving_engine.h"
#include "engine/toolcall/family.h"
#include "server/chat_prompt.h"
#include "server/server_config.h"

namespace rill::server {

inline constexpr const char* kRillVersion = "0.1.0";

struct ModelInfo {
  std::string served_name;
  std::string architecture;
  std::string dtype;
  std::string quantization = "none";  // describe_quantization (engine/model/quantization.h)
  int context_length = 0;
  int vocab_size = 0;
  std::vector<int> eos_token_ids;
  int tensor_parallel_size = 1;  // GPUs the model is split over (EngineOptions)
  /// What a request or session starts from before its own sampling fields: the server's
  /// override, then the model's generation_config.json, then OpenAI's defaults
  /// (resolve_sampling_defaults; docs/api.md, "Sampling fields").
  SamplingParams sampling_defaults;
  /// The format chat replies' tool calls are parsed in (--tool-call-parser; resolve_tool_family).
  toolcall::ToolFamily tool_family = toolcall::ToolFamily::kNone;
};

/// One access-log line's worth of a finished request.
struct AccessRecord {
  std::string protocol;  // "http" | "grpc"
  std::string method;    // "POST /v1/completions", "Generate", ...
  std::string request_id;
  int status = 0;  // HTTP status or gRPC code
  std::string finish_reason;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  RequestTimings timings;
};

class ServingContext {
 public:
  explicit ServingContext(ServerConfig config);

  const ServerConfig& config() const { return config_; }

  /// Installs the loaded model's engine (serving starts) and its description; the context does
  /// not own the engine.
  void set_engine(ServingEngine* engine, ModelInfo info, std::unique_ptr<ChatRenderer> chat);
  /// nullptr while loading (and after shutdown); callers answer kUnavailable.
  ServingEngine* engine() const { return engine_.load(std::memory_order_acquire); }
  /// The engine, or throws kUnavailable ("loading" / "shutting down").
  ServingEngine& require_engine() const;
  void clear_engine() { engine_.store(nullptr, std::memory_order_release); }

  const ModelInfo& model() const { return info_; }
  const ChatRenderer& chat() const { return *chat_; }

  /// Stop taking requests (set on SIGTERM before the engine drains).
  void set_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  /// "" when healthy, else why not (loading, draining, stalled).
  std::string unhealthy_reason() const;

  /// A fresh, unguessable request id: `prefix` ("cmpl-", "chatcmpl-", "grpc-") and 128 random
  /// bits as 32 hex digits (random_id in engine/serving/ids.h). Holding it is the right to
  /// cancel the request (docs/api.md, "Who may cancel what").
  static std::string new_request_id(const std::string& prefix);

  /// Prompt text -> ids (special tokens / BOS added unless `has_special_tokens`); empty text is
  /// kInvalidArgument.
  std::vector<int32_t> encode_prompt(const std::string& text,
                                     bool has_special_tokens = false) const;
  /// Checks prompt ids against the vocabulary and the prompt limit (kInvalidArgument naming
  /// `param`); the engine checks the rest.
  void check_prompt(const std::vector<int32_t>& ids, const std::string& param) const;

  void access_log(const AccessRecord& r) const;

 private:
  ServerConfig config_;
  std::atomic<ServingEngine*> engine_{nullptr};
  ModelInfo info_;
  std::unique_ptr<ChatRenderer> chat_;
  std::atomic<bool> draining_{false};
};

}  // namespace rill::server
