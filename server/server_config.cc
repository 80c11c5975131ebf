#include "server/server_config.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "server/sampling_json.h"

namespace rill::server {
namespace {

using Target = std::variant<int*, int64_t*, double*, bool*, std::string*,
                            std::chrono::milliseconds*, SamplingOverrides*>;

// One configurable value: its JSON place ("section.key" or "key"), its flag and its help.
struct Field {
  std::string path;  // JSON: "http_port", "engine.block_size", "scheduler.max_num_seqs"
  std::string flag;  // command line: "--http-port"
  std::string help;
  Target target;
};

std::vector<Field> fields(ServerConfig& c) {
  EngineOptions& e = c.engine;
  SchedulerConfig& s = c.scheduler;
  return {
      {"model", "--model", "model directory (Hugging Face) or llama2.c checkpoint", &c.model},
      {"served_model_name", "--served-model-name",
       "model name clients use (default: the directory name)", &c.served_model_name},
      {"host", "--host", "bind address of the HTTP and gRPC listeners", &c.host},
      {"http_port", "--http-port", "HTTP port (0: ephemeral)", &c.http_port},
      {"grpc_port", "--grpc-port", "gRPC port (0: ephemeral)", &c.grpc_port},
      {"http_threads", "--http-threads", "threads serving HTTP connections", &c.http_threads},
      {"max_body_bytes", "--max-body-bytes", "largest HTTP request body (else 413)",
       &c.max_body_bytes},
      {"max_stream_buffer_bytes", "--max-stream-buffer-bytes",
       "unsent streamed bytes before a slow reader is cancelled", &c.max_stream_buffer_bytes},
      {"max_prompt_tokens", "--max-prompt-tokens",
       "longest prompt accepted (0: the model's context)", &c.max_prompt_tokens},
      {"drain_timeout_s", "--drain-timeout", "seconds to finish in-flight requests on SIGTERM",
       &c.drain_timeout_s},
      {"log_level", "--log-level", "trace, debug, info, warn, error, critical or off",
       &c.log_level},
      {"access_log", "--access-log", "one log line per request", &c.access_log},
      {"generation_config", "--generation-config",
       "sampling defaults: auto (the model's generation_config.json), none, or a file or directory",
       &c.generation_config},
      {"default_sampling", "--default-sampling",
       "sampling defaults over the model's, as a JSON object ('{\"temperature\": 0.7}')",
       &c.default_sampling},
      {"engine.device", "--device", "auto, cpu or cuda", &e.device},
      {"engine.dtype", "--dtype", "CUDA weights: auto, float16 or bfloat16", &e.dtype},
      {"engine.kv_cache_dtype", "--kv-cache-dtype", "auto or fp8", &e.kv_cache_dtype},
      {"engine.quantization", "--quantization",
       "linear weights: auto (what the checkpoint says), fp8 or none", &e.quantization},
      {"engine.block_size", "--block-size", "tokens per KV block", &e.block_size},
      {"engine.cpu_threads", "--cpu-threads", "CPU runner threads (0: all cores)", &e.cpu_threads},
      {"engine.cpu_kv_cache_bytes", "--cpu-kv-cache-bytes", "CPU runner KV pool bytes",
       &e.cpu_kv_cache_bytes},
      {"engine.host_kv_cache_bytes", "--host-kv-cache-bytes",
       "host memory for offloaded idle sessions' caches (pinned on the GPU, allocated at start)",
       &e.host_kv_cache_bytes},
      {"engine.gpu_memory_fraction", "--gpu-memory-fraction",
       "share of free GPU memory for weights + KV", &e.gpu_memory_fraction},
      {"engine.max_batch", "--max-batch", "CUDA runner: most sequences in one step", &e.max_batch},
      {"engine.max_step_tokens", "--max-step-tokens", "CUDA runner: most tokens in one step",
       &e.max_step_tokens},
      {"engine.cuda_graphs", "--cuda-graphs", "replay decode steps as CUDA graphs",
       &e.cuda_tuning.cuda_graphs},
      {"engine.fused_decode", "--fused-decode", "SiLU-and-mul inside the decode gate|up GEMV",
       &e.cuda_tuning.fused_decode},
      {"scheduler.max_num_seqs", "--max-num-seqs", "sequences in one step", &s.max_num_seqs},
      {"scheduler.max_num_batched_tokens", "--max-num-batched-tokens", "tokens in one step",
       &s.max_num_batched_tokens},
      {"scheduler.max_queued_requests", "--max-queued-requests",
       "waiting requests before refusing (503)", &s.max_queued_requests},
      {"scheduler.max_queued_prompt_tokens", "--max-queued-prompt-tokens",
       "waiting prompt tokens before refusing", &s.max_queued_prompt_tokens},
      {"scheduler.queue_timeout_ms", "--queue-timeout-ms", "default longest wait to be scheduled",
       &s.queue_timeout},
      {"scheduler.stall_timeout_ms", "--stall-timeout-ms",
       "work pending and no step this long: stalled", &s.stall_timeout},
      {"scheduler.max_buffered_chunks", "--max-buffered-chunks",
       "untaken chunks before a slow consumer is cancelled", &s.max_buffered_chunks},
      {"scheduler.max_sink", "--max-sink",
       "streaming cache: most sink tokens a request may ask for", &s.max_sink},
      {"scheduler.max_window", "--max-window",
       "streaming cache: largest window a request may ask for", &s.max_window},
      {"scheduler.aging_per_s", "--aging-per-s", "priority aging per second waited",
       &s.aging_per_s},
      {"scheduler.kv_watermark", "--kv-watermark",
       "share of KV blocks kept free for running sequences", &s.kv_watermark},
      {"scheduler.max_sessions", "--max-sessions", "live sessions at most (POST /v1/sessions: 503)",
       &s.max_sessions},
      {"scheduler.session_gpu_fraction", "--session-gpu-fraction",
       "share of the KV pool idle sessions may keep", &s.session_gpu_fraction},
      {"scheduler.session_idle_ttl_ms", "--session-idle-ttl-ms",
       "idle sessions expire after this long", &s.session_idle_ttl},
      {"scheduler.max_restores_per_step", "--max-restores-per-step",
       "offloaded session caches copied back per step", &s.max_restores_per_step},
  };
}

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, field + ": " + why);
}

void set_from_json(const Field& f, const nlohmann::json& v) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) bad(f.path, "expected a string");
          *p = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, SamplingOverrides>) {
          *p = sampling_overrides_from_json(v, f.path);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) bad(f.path, "expected true or false");
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) bad(f.path, "expected a number");
          *p = v.get<double>();
        } else {
          if (!v.is_number_integer()) bad(f.path, "expected an integer");
          const auto x = v.get<int64_t>();
          if constexpr (std::is_same_v<T, int>) {
            if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
              bad(f.path, "out of range");
            *p = static_cast<int>(x);
          } else if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
            *p = std::chrono::milliseconds(x);
          } else {
            *p = x;
          }
        }
      },
      f.target);
}

// --default-sampling's JSON text: the table's fields and checks (sampling_json.h), whose
// FieldError (kInvalidArgument) names "default_sampling.<field>".
SamplingOverrides sampling_overrides_text(const std::string& text, const std::string& path) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("expected a JSON object: ") + e.what());
  }
  return sampling_overrides_from_json(v, path);
}

void check(bool ok, const std::string& field, const std::string& why) {
  if (!ok) bad(field, why);
}

}  // namespace

ServerConfig load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, "config: cannot open " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": " + e.what());
  }
  if (!j.is_object())
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": expected a JSON object");
  ServerConfig c;
  const std::vector<Field> fs = fields(c);
  auto find = [&](const std::string& p) -> const Field* {
    for (const Field& f : fs)
      if (f.path == p) return &f;
    return nullptr;
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "engine" || key == "scheduler") {
      if (!value.is_object()) bad(key, "expected an object");
      for (const auto& [k2, v2] : value.items()) {
        const Field* f = find(key + "." + k2);
        if (!f) bad(key + "." + k2, "unknown field");
        set_from_json(*f, v2);
        c.explicit_fields.insert(f->path);
      }
      continue;
    }
    if (key.starts_with("_")) continue;  // comments ("_comment": ...)
    const Field* f = find(key);
    if (!f) bad(key, "unknown field");
    set_from_json(*f, value);
    c.explicit_fields.insert(f->path);
  }
  return c;
}

void validate_config(const ServerConfig& c) {
  check(!c.model.empty(), "model", "must not be empty");
  check(!c.generation_config.empty(), "generation_config",
        "must be auto, none, or a generation_config.json file or its directory");
  check(!c.host.empty(), "host", "must not be empty");
  check(c.http_port >= 0 && c.http_port <= 65535, "http_port", "must be in [0, 65535]");
  check(c.grpc_port >= 0 && c.grpc_port <= 65535, "grpc_port", "must be in [0, 65535]");
  check(c.http_port == 0 || c.http_port != c.grpc_port, "grpc_port", "must differ from http_port");
  check(c.http_threads >= 1 && c.http_threads <= 256, "http_threads", "must be in [1, 256]");
  check(c.max_body_bytes >= 1024 && c.max_body_bytes <= (int64_t{1} << 30), "max_body_bytes",
        "must be in [1024, 2^30]");
  check(c.max_stream_buffer_bytes >= 4096, "max_stream_buffer_bytes", "must be at least 4096");
  check(c.max_prompt_tokens >= 0, "max_prompt_tokens", "must be >= 0");
  check(std::isfinite(c.drain_timeout_s) && c.drain_timeout_s >= 0 && c.drain_timeout_s <= 86400,
        "drain_timeout_s", "must be in [0, 86400]");
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= c.log_level == l;
  check(level_ok, "log_level", "must be one of trace, debug, info, warn, error, critical, off");
  const EngineOptions& e = c.engine;
  check(e.device == "auto" || e.device == "cpu" || e.device == "cuda", "engine.device",
        "must be auto, cpu or cuda");
  check(e.dtype == "auto" || e.dtype == "float16" || e.dtype == "bfloat16", "engine.dtype",
        "must be auto, float16 or bfloat16");
  check(e.kv_cache_dtype == "auto" || e.kv_cache_dtype == "fp8", "engine.kv_cache_dtype",
        "must be auto or fp8");
  check(e.quantization == "auto" || e.quantization == "fp8" || e.quantization == "none",
        "engine.quantization", "must be auto, fp8 or none");
  check(e.block_size >= 1 && e.block_size <= 1024 && (e.block_size & (e.block_size - 1)) == 0,
        "engine.block_size", "must be a power of two in [1, 1024]");
  check(e.cpu_threads >= 0, "engine.cpu_threads", "must be >= 0");
  check(e.cpu_kv_cache_bytes > 0, "engine.cpu_kv_cache_bytes", "must be > 0");
  check(e.host_kv_cache_bytes >= 0, "engine.host_kv_cache_bytes", "must be >= 0");
  check(e.gpu_memory_fraction > 0 && e.gpu_memory_fraction <= 1, "engine.gpu_memory_fraction",
        "must be in (0, 1]");
  check(e.max_batch >= 1, "engine.max_batch", "must be >= 1");
  check(e.max_step_tokens >= 1, "engine.max_step_tokens", "must be >= 1");
  const SchedulerConfig& s = c.scheduler;
  check(s.max_num_seqs >= 1, "scheduler.max_num_seqs", "must be >= 1");
  check(s.max_num_batched_tokens >= 1, "scheduler.max_num_batched_tokens", "must be >= 1");
  check(s.max_queued_requests >= 0, "scheduler.max_queued_requests", "must be >= 0");
  check(s.max_queued_prompt_tokens >= 0, "scheduler.max_queued_prompt_tokens", "must be >= 0");
  check(s.queue_timeout.count() > 0, "scheduler.queue_timeout_ms", "must be > 0");
  check(s.stall_timeout.count() > 0, "scheduler.stall_timeout_ms", "must be > 0");
  check(s.max_buffered_chunks >= 1, "scheduler.max_buffered_chunks", "must be >= 1");
  check(s.max_sink >= 0, "scheduler.max_sink", "must be >= 0");
  check(s.max_window >= 1, "scheduler.max_window", "must be >= 1");
  check(std::isfinite(s.aging_per_s) && s.aging_per_s >= 0, "scheduler.aging_per_s",
        "must be >= 0");
  check(s.kv_watermark >= 0 && s.kv_watermark < 1, "scheduler.kv_watermark", "must be in [0, 1)");
  check(s.max_sessions >= 0, "scheduler.max_sessions", "must be >= 0");
  check(std::isfinite(s.session_gpu_fraction) && s.session_gpu_fraction >= 0 &&
            s.session_gpu_fraction <= 1,
        "scheduler.session_gpu_fraction", "must be in [0, 1]");
  check(s.session_idle_ttl.count() > 0, "scheduler.session_idle_ttl_ms", "must be > 0");
  check(s.max_restores_per_step >= 1, "scheduler.max_restores_per_step", "must be >= 1");
}

bool parse_command_line(int argc, char** argv, ServerConfig& config) {
  // The file first (wherever --config appears), then every flag on top of it.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config = load_config_file(argv[i + 1]);
    else if (a.starts_with("--config="))
      config = load_config_file(a.substr(9));
  }
  const std::vector<Field> fs = fields(config);
  CLI::App app{"rill-server: streaming LLM inference over gRPC and an OpenAI-compatible HTTP API"};
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // the last flag wins
  std::string config_path;
  app.add_option("--config", config_path, "JSON configuration file (configs/); flags override it");
  for (const Field& f : fs) {
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
            app.add_option_function<int64_t>(
                f.flag, [p](const int64_t& v) { *p = std::chrono::milliseconds(v); }, f.help);
          } else if constexpr (std::is_same_v<T, SamplingOverrides>) {
            app.add_option_function<std::string>(
                f.flag, [p, &f](const std::string& v) { *p = sampling_overrides_text(v, f.path); },
                f.help);
          } else if constexpr (std::is_same_v<T, bool>) {
            app.add_option(f.flag, *p, f.help + " (true/false)");
          } else {
            app.add_option(f.flag, *p, f.help)->capture_default_str();
          }
        },
        f.target);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
  for (const Field& f : fs)
    if (app.get_option(f.flag)->count() > 0) config.explicit_fields.insert(f.path);
  return true;
}

void apply_scheduler_defaults(ServerConfig& config, const SchedulerConfig& defaults) {
  ServerConfig d;
  d.scheduler = defaults;
  const std::vector<Field> to = fields(config), from = fields(d);
  for (size_t i = 0; i < to.size(); ++i) {
    if (!to[i].path.starts_with("scheduler.") || config.explicit_fields.count(to[i].path)) continue;
    std::visit([&](auto* dst) { *dst = *std::get<decltype(dst)>(from[i].target); }, to[i].target);
  }
}

std::string config_to_json(const ServerConfig& config) {
  ServerConfig c = config;
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : fields(c)) {
    nlohmann::json v;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
            v = p->count();
          else if constexpr (std::is_same_v<T, SamplingOverrides>)
            v = sampling_overrides_json(*p);
          else
            v = *p;
        },
        f.target);
    const auto dot = f.path.find('.');
    if (dot == std::string::npos)
      j[f.path] = v;
    else
      j[f.path.substr(0, dot)][f.path.substr(dot + 1)] = v;
  }
  return j.dump();
}

}  // namespace rill::server
