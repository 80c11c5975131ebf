// rill-ppl: perplexity over a long text for the methods of the StreamingLLM paper's comparison
// (dense attention within the context, window-only, sliding window with re-computation,
// attention sinks + window), printed like its Tables 1-2, with per-token latency (Figure 10).
// With --golden it checks the numbers against an independent reference.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/offline/perplexity.h"
#include "engine/runner_factory.h"
#include "tools/common/engine_flags.h"

using namespace rill;

namespace {

std::string cache_label(const PplConfig& c) {
  switch (c.method) {
    case PplMethod::kFull: return "ctx " + std::to_string(c.context);
    case PplMethod::kWindow: return "0+" + std::to_string(c.window);
    case PplMethod::kRecompute: return std::to_string(c.window);
    case PplMethod::kStreaming: return std::to_string(c.n_sink) + "+" + std::to_string(c.window);
  }
  return "";
}

std::vector<int32_t> read_text_ids(const Model& m, const std::string& path, double held_out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (held_out > 0 && held_out < 1) {  // the last fraction, from a line start (as the training split)
    const size_t cut = static_cast<size_t>(text.size() * (1.0 - held_out));
    const size_t nl = text.rfind('\n', cut == 0 ? 0 : cut - 1);
    text = text.substr(nl == std::string::npos ? 0 : nl + 1);
  }
  return m.tokenizer->encode(text, false);
}

int check_golden(ModelRunner& runner, const std::string& path, const cli::Args& args) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open");
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<int32_t> ids = g.at("eval_ids").get<std::vector<int32_t>>();
  const long long limit = args.get_int64("max-tokens");
  if (limit > 0 && static_cast<size_t>(limit) < ids.size()) ids.resize(limit);
  const int32_t bos = g.at("bos_id").get<int32_t>();
  const double tol = args.get_double("tolerance");
  std::printf("%-10s %-10s %8s %12s %12s %9s\n", "method", "cache", "tokens", "reference", "rill", "rel diff");
  bool ok = true;
  for (const auto& m : g.at("methods")) {
    PplConfig c;
    c.method = parse_ppl_method(m.at("mode").get<std::string>());
    c.n_sink = m.at("n_sink").get<int>();
    c.window = m.at("window").get<int>();
    c.context = g.value("context", 0);
    c.chunk = args.get_int("chunk");
    const auto ref_nll = m.at("nll").get<std::vector<double>>();
    const PplResult r = evaluate_perplexity(runner, ids, bos, c);
    const double ref = perplexity_of(ref_nll, 0, ids.size()), ours = r.ppl;
    const double rel = std::abs(ours - ref) / ref;
    ok = ok && rel <= tol;
    std::printf("%-10s %-10s %8zu %12.4f %12.4f %8.3f%% %s\n", ppl_method_name(c.method), cache_label(c).c_str(),
                ids.size(), ref, ours, rel * 100, rel <= tol ? "" : "  <-- exceeds tolerance");
  }
  std::printf("%s (tolerance %.2f%%)\n", ok ? "all within tolerance" : "MISMATCH", tol * 100);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Args args("rill-ppl", "Perplexity of a long text with full, window, recompute and streaming attention.");
  cli::add_engine_flags(args);
  args.option("text", "", "text file to evaluate");
  args.option("held-out", "0", "evaluate only the last fraction of the text (0.1: the training script's split)");
  args.option("mode", "all", "full | window | recompute | streaming | all");
  args.option("sink", "4", "attention sinks (streaming)");
  args.option("window", "252", "window (streaming); window-only and recompute use sink + window");
  args.option("context", "0", "full: chunk length (0: the model's context)");
  args.option("max-tokens", "0", "evaluate at most this many tokens (0: all)");
  args.option("chunk", "256",
              "tokens fed per step (does not change the result with a 16-bit KV cache)");
  args.option("latency-tokens", "64", "tokens timed one at a time for the per-token latency (0: skip)");
  args.option("golden", "", "JSON reference (tools/streaming_reference.py): compare every method it holds");
  args.option("tolerance", "0.005", "relative perplexity tolerance for --golden");
  args.parse(argc, argv);
  try {
    const Model model = load_model(args.get("model"));
    auto runner = make_runner(model, cli::engine_options(args));
    if (!args.get("golden").empty()) return check_golden(*runner, args.get("golden"), args);
    if (args.get("text").empty()) args.fail("--text (or --golden) is required");
    std::vector<int32_t> ids = read_text_ids(model, args.get("text"), args.get_double("held-out"));
    const long long limit = args.get_int64("max-tokens");
    if (limit > 0 && static_cast<size_t>(limit) < ids.size()) ids.resize(limit);
    const auto bos = model.bos_token_id();
    if (!bos) args.fail("the model has no BOS token");
    const int sink = args.get_int("sink"), window = args.get_int("window");
    std::vector<PplConfig> configs;
    const std::string mode = args.get("mode");
    auto add = [&](PplMethod m) {
      PplConfig c;
      c.method = m;
      c.n_sink = sink;
      c.window = m == PplMethod::kStreaming ? window : sink + window;  // same cache budget
      c.context = args.get_int("context") > 0 ? args.get_int("context") : runner->kv().max_context();
      c.chunk = args.get_int("chunk");
      configs.push_back(c);
    };
    if (mode == "all") {
      for (PplMethod m : {PplMethod::kFull, PplMethod::kWindow, PplMethod::kRecompute, PplMethod::kStreaming}) add(m);
    } else {
      add(parse_ppl_method(mode));
    }
    const int lat_tokens = args.get_int("latency-tokens");
    std::printf("model %s on %s, %zu tokens\n", args.get("model").c_str(), runner->name().c_str(), ids.size());
    std::printf("%-10s %-10s %10s %12s %14s\n", "method", "cache", "PPL", "eval time s", "ms/token (1x1)");
    for (const PplConfig& c : configs) {
      const PplResult r = evaluate_perplexity(*runner, ids, *bos, c);
      double lat = NAN;
      if (lat_tokens > 0) {
        try {
          lat = per_token_latency_ms(*runner, ids, *bos, c, lat_tokens);
        } catch (const Error&) {  // text too short for this method's timing
        }
      }
      std::printf("%-10s %-10s %10.3f %12.2f %14.3f\n", ppl_method_name(c.method), cache_label(c).c_str(), r.ppl,
                  r.seconds, lat);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-ppl: error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "rill-ppl: bad golden file: %s\n", e.what());
    return 1;
  }
}
