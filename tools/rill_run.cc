// rill-run: offline generation. Streams the text to stdout as it is generated, then prints the
// prompt and generated token counts, time to first token and time per output token to stderr.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/offline/generator.h"
#include "engine/runner_factory.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/common/engine_flags.h"

using namespace rill;

// --chat: the conversation (--messages FILE, else --prompt as one user message) rendered with
// the model's chat template, ending with the generation prompt.
static std::string chat_prompt(const cli::Args& args) {
  namespace fs = std::filesystem;
  fs::path dir = args.get("model");
  if (!fs::is_directory(dir)) dir = dir.parent_path();
  const ChatTemplate chat = ChatTemplate::from_model_dir(dir);
  nlohmann::ordered_json messages;
  if (args.given("messages")) {
    std::ifstream in(args.get("messages"), std::ios::binary);
    if (!in) args.fail("cannot open --messages " + args.get("messages"));
    std::ostringstream text;
    text << in.rdbuf();
    try {
      messages = nlohmann::ordered_json::parse(text.str());
    } catch (const nlohmann::ordered_json::exception& e) {
      args.fail("--messages " + args.get("messages") + ": " + e.what());
    }
  } else {
    messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", args.get("prompt")}});
  }
  ChatTemplateOptions options;
  options.add_generation_prompt = true;
  return chat.render(messages, options);
}

int main(int argc, char** argv) {
  cli::Args args("rill-run", "Generate text offline with a model and stream it to stdout.");
  cli::add_engine_flags(args);
  args.option("prompt", "ROMEO:", "prompt text");
  args.option("max-tokens", "128", "most tokens to generate");
  args.multi("stop-token-id", "extra token id that ends generation (repeatable)");
  args.flag("ignore-eos", "keep generating past end-of-sequence tokens");
  args.flag("no-bos", "do not add the tokenizer's special tokens (BOS) to the prompt");
  args.flag("chat",
            "render the prompt with the model's chat template (--prompt is a user message)");
  args.option("messages", "", "with --chat: a JSON file holding the list of messages");
  cli::add_sampling_flags(args);
  cli::add_cache_flags(args);
  args.parse(argc, argv);
  try {
    const Model model = load_model(args.get("model"));
    GenerationRequest req;
    if (args.given("messages") && !args.on("chat")) args.fail("--messages needs --chat");
    // A chat template writes every special token itself (BOS included), so the rendered text
    // is encoded without adding special tokens, as transformers' apply_chat_template(
    // tokenize=True) and vLLM's chat endpoint do; otherwise BOS would appear twice.
    if (args.on("chat")) {
      req.prompt = model.tokenizer->encode(chat_prompt(args), false);
    } else {
      req.prompt = model.tokenizer->encode(args.get("prompt"), !args.on("no-bos"));
    }
    if (req.prompt.empty()) {
      if (!model.bos_token_id()) args.fail("the prompt is empty and the model has no BOS token");
      req.prompt.push_back(*model.bos_token_id());
    }
    req.sampling = cli::sampling_params(args, model.generation);
    req.sampling.validate();
    req.cache = cli::cache_policy(args);
    req.max_tokens = args.get_int("max-tokens");
    for (int id : model.stop_token_ids()) req.stop_token_ids.push_back(id);
    for (const auto& s : args.all("stop-token-id")) req.stop_token_ids.push_back(std::stoi(s));
    req.ignore_eos = args.on("ignore-eos");
    auto runner = make_runner(model, cli::engine_options(args));

    IncrementalDetokenizer detok(*model.tokenizer, true, req.prompt);
    const GenerationResult r = generate(*runner, 1, req, [&](int32_t tok) {
      const std::string piece = detok.push(tok);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    const std::string tail = detok.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "\n[%s] prompt tokens: %d | generated tokens: %zu | finish: %s\n"
                 "time to first token: %.2f ms | time per output token: %.2f ms (%.1f tokens/s)\n",
                 runner->name().c_str(), r.prompt_tokens, r.tokens.size(), finish_reason_name(r.finish),
                 r.ttft_s * 1e3, r.tpot_s * 1e3, r.tpot_s > 0 ? 1.0 / r.tpot_s : 0.0);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-run: error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
}
