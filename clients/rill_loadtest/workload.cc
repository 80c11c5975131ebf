#include "clients/rill_loadtest/workload.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace rill::loadtest {

using nlohmann::json;

const std::string& synthetic_passage() {
  static const std::string kPassage =
      "The harbour woke before the town did. Fishing boats slid out past the breakwater while "
      "the lamps along the quay were still burning, and the gulls followed them in a loose "
      "grey cloud. By the time the baker opened his shutters the first crates of herring were "
      "already stacked by the market hall, and the carters argued about the price of ice. "
      "Children ran down the steep lanes with bread under their arms; an old man mended a net "
      "on an upturned barrel and told anyone who stopped that the wind would turn by noon. "
      "Nobody believed him, and by noon the wind had turned, bringing rain from the west and "
      "sending the smaller boats home early. In the afternoon the rain thinned to mist. The "
      "schoolmaster walked his class along the cliff path to count the nesting birds, and they "
      "lost their tally twice before giving up and watching the sea instead. At dusk the "
      "lighthouse keeper climbed his stairs, trimmed the wick, wound the clockwork and wrote a "
      "single line in the log: calm evening, three ships passed, all well.";
  return kPassage;
}

std::vector<PromptEntry> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read prompts file " + path);
  const bool jsonl = path.ends_with(".jsonl");
  std::vector<PromptEntry> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    PromptEntry e;
    if (!jsonl) {
      e.prompt = line;
      out.push_back(std::move(e));
      continue;
    }
    const json j = json::parse(line, nullptr, false);
    const std::string where = path + ":" + std::to_string(number);
    if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
      e.prompt = j["prompt"].get<std::string>();
    } else if (j.is_object() && j.contains("messages") && j["messages"].is_array()) {
      for (const json& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") ||
            !m["role"].is_string() || !m["content"].is_string())
          throw std::runtime_error(where + ": each message needs string role and content");
        e.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      if (e.messages.empty()) throw std::runtime_error(where + ": empty messages");
    } else {
      throw std::runtime_error(where + ": expected {\"prompt\": ...} or {\"messages\": [...]}");
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) throw std::runtime_error("no prompts in " + path);
  return out;
}

Workload::Workload(WorkloadConfig config, std::vector<PromptEntry> prompts,
                   std::vector<int32_t> token_pool, std::vector<std::string> words,
                   double tokens_per_word)
    : config_(std::move(config)),
      prompts_(std::move(prompts)),
      token_pool_(std::move(token_pool)),
      words_(std::move(words)),
      tokens_per_word_(tokens_per_word > 0 ? tokens_per_word : 1),
      rng_(config_.seed) {
  if ((prompts_.empty() || config_.shared_prefix_groups > 0) &&
      (token_pool_.empty() || words_.empty()))
    throw std::invalid_argument("synthetic prompts need a non-empty token pool and word list");
  // The groups' prompts come from a generator of their own: the same seed gives the same
  // groups whatever else the run draws.
  std::mt19937_64 group_rng(config_.seed ^ 0x5eedULL);
  for (int g = 0; g < config_.shared_prefix_groups; ++g) {
    group_ids_.push_back(synthetic_ids(config_.shared_prefix_len, group_rng));
    group_text_.push_back(synthetic_text(config_.shared_prefix_len, group_rng));
  }
}

RequestSpec Workload::base_spec() {
  RequestSpec s;
  s.chat = config_.chat || config_.turns > 1;
  s.max_tokens = config_.output_len.sample(rng_);
  s.ignore_eos = config_.ignore_eos;
  s.temperature = config_.temperature;
  s.cache = config_.cache;
  s.sink = config_.sink;
  s.window = config_.window;
  s.keep_text = config_.turns > 1;
  s.ttft_target_ms = config_.ttft_target_ms;
  s.tpot_target_ms = config_.tpot_target_ms;
  if (config_.cancel_fraction > 0 &&
      std::uniform_real_distribution<double>(0, 1)(rng_) < config_.cancel_fraction) {
    // Cancel within the first half of the answer, so the server is still generating when the
    // cancellation reaches it (a later one could race with a normal finish).
    s.cancel_after_tokens =
        std::uniform_int_distribution<int>(1, std::max(1, s.max_tokens / 2))(rng_);
  }
  return s;
}

// Token ids drawn independently from the passage's (as vLLM's random dataset draws them): two
// prompts share no prefix by chance, so a run without shared-prefix groups has no prefix-cache
// hits (a slice of the short passage from a random offset would repeat every few hundred).
std::vector<int32_t> Workload::synthetic_ids(int tokens, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, token_pool_.size() - 1);
  std::vector<int32_t> ids(static_cast<size_t>(std::max(0, tokens)));
  for (int32_t& id : ids) id = token_pool_[pick(rng)];
  return ids;
}

// Words of the passage drawn independently, about `tokens` tokens of them.
std::string Workload::synthetic_text(int tokens, std::mt19937_64& rng) {
  const int num_words = std::max(1, static_cast<int>(tokens / tokens_per_word_ + 0.5));
  std::uniform_int_distribution<size_t> pick(0, words_.size() - 1);
  std::string text;
  for (int i = 0; i < num_words; ++i) {
    if (i) text += ' ';
    text += words_[pick(rng)];
  }
  return text;
}

std::string Workload::next_user_text() {
  if (prompts_.empty()) return synthetic_text(config_.input_len.sample(rng_), rng_);
  const PromptEntry& e = prompts_[next_prompt_++ % prompts_.size()];
  return e.messages.empty() ? e.prompt : e.messages.back().content;
}

RequestSpec Workload::first_turn() {
  RequestSpec s = base_spec();
  if (!prompts_.empty()) {
    const PromptEntry& e = prompts_[next_prompt_++ % prompts_.size()];
    if (!e.messages.empty()) {
      s.chat = true;
      s.messages = e.messages;
    } else if (s.chat) {
      s.messages = {{"user", e.prompt}};
    } else {
      s.prompt_text = e.prompt;
    }
    return s;
  }
  const int tokens = config_.input_len.sample(rng_);
  if (!group_ids_.empty()) {  // a group's system prompt, then the request's own question
    const size_t g = std::uniform_int_distribution<size_t>(0, group_ids_.size() - 1)(rng_);
    s.group = static_cast<int>(g);
    if (s.chat) {
      s.messages = {{"system", group_text_[g]}, {"user", synthetic_text(tokens, rng_)}};
    } else {
      s.prompt_ids = group_ids_[g];
      const std::vector<int32_t> question = synthetic_ids(tokens, rng_);
      s.prompt_ids.insert(s.prompt_ids.end(), question.begin(), question.end());
    }
    return s;
  }
  if (s.chat)
    s.messages = {{"user", synthetic_text(tokens, rng_)}};
  else
    s.prompt_ids = synthetic_ids(tokens, rng_);
  return s;
}

RequestSpec Workload::long_stream(int prompt_len, int sink, int window) {
  RequestSpec s;
  s.prompt_ids = synthetic_ids(prompt_len, rng_);
  s.max_tokens = 1 << 24;
  s.ignore_eos = true;
  s.temperature = config_.temperature;
  s.cache = "streaming";
  s.sink = sink;
  s.window = window;
  s.control = std::make_shared<StreamControl>();
  return s;
}

RequestSpec Workload::next_turn(const RequestSpec& previous, const std::string& answer) {
  RequestSpec s = base_spec();
  s.chat = true;
  s.group = previous.group;
  s.messages = previous.messages;
  s.messages.push_back({"assistant", answer});
  s.messages.push_back({"user", next_user_text()});
  return s;
}

}  // namespace rill::loadtest
