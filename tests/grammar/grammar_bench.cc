// Grammar engine timings on the host: compiling a typical schema (15 properties, nesting 3)
// cold and from the cache, and the per-token work of one constrained sequence (mask + accept)
// while it writes a valid document. Vocabularies: the default model's (4,096 byte-level BPE)
// and a synthetic 128,256-token one shaped like Llama-3's (words with and without a leading
// space, numbers, JSON punctuation runs, all 256 bytes). Also the warm-up of the shared tables
// a server runs at load (ConstraintCache::warm_up) and the first schema compiled after it.
// Prints one line per figure; --quick (CI) runs fewer tokens and leaves out a third vocabulary:
// the synthetic one with Llama-3's long runs of one character (up to 128 bytes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/tokenizer/tokenizer.h"

using namespace rill;
using namespace rill::grammar;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "id":{"type":"integer","minimum":0,"maximum":1000000},
  "name":{"type":"string","maxLength":64},
  "email":{"type":"string","format":"email"},
  "active":{"type":"boolean"},
  "score":{"type":"number"},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "role":{"enum":["admin","user","guest"]},
  "created":{"type":"string","format":"date-time"},
  "address":{"type":"object","properties":{
     "street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"},
     "geo":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number"}},"required":["lat","lon"],"additionalProperties":false}},
   "required":["street","city","zip","geo"],"additionalProperties":false},
  "manager":{"anyOf":[{"type":"null"},{"type":"integer"}]},
  "notes":{"type":"string"},
  "level":{"type":"integer","minimum":1,"maximum":5},
  "uuid":{"type":"string","format":"uuid"},
  "ratio":{"type":"number"},
  "nickname":{"type":["string","null"]}},
 "required":["id","name","email","active","score","tags","role","created","address","manager","notes","level","uuid","ratio","nickname"],
 "additionalProperties":false})";

const char* kDocument =
    R"({"id": 4711, "name": "Ada Lovelace", "email": "ada@example.com", "active": true, "score": 98.25, )"
    R"("tags": ["math", "poetry", "engines"], "role": "admin", "created": "1843-07-10T09:30:00Z", )"
    R"("address": {"street": "12 St James's Square", "city": "London", "zip": "12345", "geo": {"lat": 51.5074, "lon": -0.1278}}, )"
    R"("manager": null, "notes": "Wrote the first published algorithm intended for a machine.", "level": 5, )"
    R"("uuid": "123e4567-e89b-12d3-a456-426614174000", "ratio": 0.5, "nickname": "Enchantress of Numbers"})";

// `long_runs`: also runs of one character of 16 to 128 bytes (spaces, tabs, newlines, '-', '=',
// '_', '*', '#'), as Llama-3 has: the longest token then bounds how far apart two positions of
// a bounded repeat (maxLength, the email format) must be to share a table.
std::shared_ptr<const Vocabulary> synthetic_vocab(int32_t size, bool long_runs = false) {
  std::vector<std::string> t;
  std::vector<uint8_t> special;
  t.emplace_back("");
  special.push_back(1);  // EOS
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b)), special.push_back(0);
  const std::vector<std::string> punct = {
      "\"", "\",", "\":", "{\"", "\"}", "\":\"", "\", \"", "\": ", "[\"",   "\"]", "},",
      "}}", "],",  " {",  " [",  ", ",  ": ",    "\n",     "\n ",  "\n   ", "  ",  "    "};
  for (const auto& p : punct) t.push_back(p), special.push_back(0);
  for (int n = 0; n < 1000; ++n) t.push_back(std::to_string(n)), special.push_back(0);
  if (long_runs)
    for (char c : {' ', '\t', '\n', '-', '=', '_', '*', '#'})
      for (int n = 16; n <= 128; n += 8)
        t.emplace_back(static_cast<size_t>(n), c), special.push_back(0);
  std::mt19937 rng(42);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  while (static_cast<int32_t>(t.size()) < size - 256) {
    std::string w = (rng() % 2) ? " " : "";
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int k = 0; k < n; ++k) w += letters[std::min<size_t>(rng() % 26, rng() % 26)];
    if (rng() % 5 == 0)
      w[w.size() > 1 ? 1 : 0] = static_cast<char>(std::toupper(w[w.size() > 1 ? 1 : 0]));
    if (rng() % 11 == 0) w += punct[rng() % punct.size()];
    t.push_back(w);
    special.push_back(0);
  }
  while (static_cast<int32_t>(t.size()) < size) t.emplace_back("<special>"), special.push_back(1);
  return std::make_shared<const Vocabulary>(std::move(t), std::move(special),
                                            std::vector<int32_t>{0});
}

// The engine's limits with a longer compile time-out: the bench reports how long a compile takes
// on a slow host rather than stopping at the serving time-out (5 s).
GrammarLimits bench_limits() {
  GrammarLimits limits;
  limits.compile_timeout = std::chrono::seconds(120);
  return limits;
}

void run(const char* name, std::shared_ptr<const Vocabulary> vocab, int rounds) {
  ConstraintSpec spec{ConstraintKind::kJsonSchema, kSchema, {}, "", ""};
  ConstraintCache cache(vocab, bench_limits());
  auto t0 = Clock::now();
  const auto c = cache.get(spec);
  const double cold_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t0 = Clock::now();
  cache.get(spec);
  const double warm_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  std::printf(
      "%s: vocab %d, schema compile %.1f ms cold (%zu automaton states, %zu token tables), %.2f us "
      "cached\n",
      name, vocab->size(), cold_ms, c->grammar.num_states(), c->tables.num_tables(), warm_us);
  // Another schema of the same building blocks (its properties renamed, one bound changed): what
  // a server that has compiled others pays for a new one (shared call-free tables, TableCache).
  std::string other = kSchema;
  for (const char* k : {"id", "name", "active", "score", "tags", "role", "created", "street",
                        "city", "notes", "level", "ratio", "nickname"}) {
    const std::string from = std::string("\"") + k + "\"", to = std::string("\"") + k + "_2\"";
    for (size_t at = other.find(from); at != std::string::npos;
         at = other.find(from, at + to.size()))
      other.replace(at, from.size(), to);
  }
  ConstraintSpec spec2 = spec;
  spec2.text = other;
  t0 = Clock::now();
  cache.get(spec2);
  const double other_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("%s: another schema of the same building blocks %.1f ms (%zu shared walks)\n", name,
              other_ms, cache.shared_tables());
  // A server that warmed its shared tables up at load (ConstraintCache::warm_up, no request
  // waiting): what the first schema it sees then costs.
  ConstraintCache warmed(vocab, bench_limits());
  t0 = Clock::now();
  const size_t walks = warmed.warm_up();
  const double warm_up_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t0 = Clock::now();
  warmed.get(spec);
  const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf(
      "%s: warm-up at load %.1f ms (%zu shared walks); the first schema after it %.1f ms (%zu new "
      "walks)\n",
      name, warm_up_ms, walks, first_ms, warmed.shared_tables() - walks);
  // Teacher-forced walk: the longest allowed token that continues kDocument.
  std::vector<double> per_token;
  std::vector<uint32_t> mask(vocab->mask_words());
  const std::string doc = kDocument;
  for (int r = 0; r < rounds; ++r) {
    GrammarMatcher m(c);
    size_t pos = 0;
    while (true) {
      const auto s = Clock::now();
      m.fill_mask(mask);
      const auto masked = Clock::now();
      int32_t best = -1;
      if (pos == doc.size()) {
        best = 0;
      } else {
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (!((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) || vocab->is_eos(id))
            continue;
          const std::string& b = vocab->bytes(id);
          if (doc.compare(pos, b.size(), b) == 0 &&
              (best < 0 || b.size() > vocab->bytes(best).size()))
            best = id;
        }
      }
      const auto pick = Clock::now();  // the choice stands in for the sampler: not timed
      if (best < 0 || !m.accept(best)) {
        std::fprintf(stderr, "%s: the document left the grammar at byte %zu\n", name, pos);
        std::exit(1);
      }
      const auto e = Clock::now();
      per_token.push_back(
          std::chrono::duration<double, std::micro>((masked - s) + (e - pick)).count());
      if (best == 0) break;
      pos += vocab->bytes(best).size();
    }
  }
  std::sort(per_token.begin(), per_token.end());
  double sum = 0;
  for (double x : per_token) sum += x;
  std::printf(
      "%s: per token (mask + accept, host) mean %.1f us, p50 %.1f us, p99 %.1f us over %zu "
      "tokens\n",
      name, sum / static_cast<double>(per_token.size()), per_token[per_token.size() / 2],
      per_token[per_token.size() * 99 / 100], per_token.size());
}

// The vocabulary of tools/rill_make_model.cc's synthetic tokenizer (the serving benchmarks'
// Llama-3-8B shape): EOS, the 256 byte symbols, then lowercase letter strings of 2, 3 and 4
// letters in order, 128,256 entries in all.
std::shared_ptr<const Vocabulary> letters_vocab(int32_t size) {
  std::vector<std::string> t{""};
  std::vector<uint8_t> special{1};
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b)), special.push_back(0);
  for (size_t len = 2; static_cast<int32_t>(t.size()) < size; ++len) {
    std::string w(len, 'a');
    while (static_cast<int32_t>(t.size()) < size) {
      t.push_back(w);
      special.push_back(0);
      size_t i = len;  // the next string of this length, the last letter fastest
      while (i > 0 && w[i - 1] == 'z') w[--i] = 'a';
      if (i == 0) break;
      ++w[i - 1];
    }
  }
  return std::make_shared<const Vocabulary>(std::move(t), std::move(special),
                                            std::vector<int32_t>{0});
}

// A long bounded string: the serving check's schema (scripts/device/structured_check.sh), whose
// 512 generated tokens are almost all inside "body" (exactly 6,000 characters). Teacher-forced
// through a document whose body is letter strings; reports the per-token time by how far into
// the body the stream is.
void run_bounded(const char* name, std::shared_ptr<const Vocabulary> vocab) {
  const char* schema =
      R"({"type":"object","properties":{"title":{"type":"string","maxLength":40},)"
      R"("tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":8},)"
      R"("score":{"type":"integer","minimum":0,"maximum":100},)"
      R"("body":{"type":"string","minLength":6000,"maxLength":6000}},)"
      R"("required":["title","tags","score","body"]})";
  ConstraintCache cache(vocab, bench_limits());
  const auto t0 = Clock::now();
  const auto c = cache.get({ConstraintKind::kJsonSchema, schema, {}, "", ""});
  const double cold_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("%s: bounded-body schema compile %.1f ms cold (%zu automaton states, %zu tables)\n",
              name, cold_ms, c->grammar.num_states(), c->tables.num_tables());
  std::string body;
  std::mt19937 rng(7);
  while (body.size() < 6000) body += static_cast<char>('a' + rng() % 26);
  const std::string head = R"({"title": "a bounded body", "tags": ["x", "yz"], "score": 42, )";
  const std::string doc = head + R"("body": ")" + body + "\"}";
  const size_t body_at = head.size() + 9;
  GrammarMatcher m(c);
  std::vector<uint32_t> mask(vocab->mask_words());
  std::vector<std::pair<size_t, double>> body_us;  // (bytes into the body, us)
  for (size_t pos = 0;;) {
    const auto s = Clock::now();
    m.fill_mask(mask);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
    int32_t best = -1;
    if (pos == doc.size()) {
      best = 0;
    } else {
      for (int32_t id = 1; id < vocab->size(); ++id) {
        const std::string& b = vocab->bytes(id);
        if ((mask[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u) &&
            doc.compare(pos, b.size(), b) == 0 &&
            (best < 0 || b.size() > vocab->bytes(best).size()))
          best = id;
      }
    }
    if (best < 0 || !m.accept(best)) {
      std::fprintf(stderr, "%s: the document left the grammar at byte %zu\n", name, pos);
      std::exit(1);
    }
    if (pos >= body_at && pos < body_at + body.size()) body_us.emplace_back(pos - body_at, us);
    if (best == 0) break;
    pos += vocab->bytes(best).size();
  }
  auto report = [&](const char* what, size_t from, size_t to) {
    std::vector<double> xs;
    for (auto [at, us] : body_us)
      if (at >= from && at < to) xs.push_back(us);
    if (xs.empty()) return;
    std::sort(xs.begin(), xs.end());
    double sum = 0;
    for (double x : xs) sum += x;
    std::printf("%s: mask inside body, %s: mean %.1f us, p50 %.1f us, max %.1f us (%zu tokens)\n",
                name, what, sum / static_cast<double>(xs.size()), xs[xs.size() / 2], xs.back(),
                xs.size());
  };
  report("first 100 tokens", 0, 400);
  report("tokens 100-500", 400, 2000);
  report("all", 0, body.size());
  report("last 16 bytes", body.size() - 16, body.size());
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool bounded_only = argc > 1 && std::strcmp(argv[1], "--bounded") == 0;
  if (bounded_only) {
    run_bounded("letters-128k", letters_vocab(128256));
    run_bounded("synthetic-128k-long-runs", synthetic_vocab(128256, true));
    return 0;
  }
  const Tokenizer tok =
      Tokenizer::from_hf_dir(std::string(RILL_SOURCE_DIR) + "/models/rill-shakespeare");
  std::vector<int32_t> eos;
  if (tok.eos_id()) eos.push_back(*tok.eos_id());
  run("rill-shakespeare", Vocabulary::from_tokenizer(tok, tok.vocab_size(), eos), quick ? 1 : 5);
  run("synthetic-128k", synthetic_vocab(128256), quick ? 1 : 3);
  if (!quick) run("synthetic-128k-long-runs", synthetic_vocab(128256, true), 1);
  run_bounded("letters-128k", letters_vocab(128256));
  if (!quick) run_bounded("synthetic-128k-long-runs", synthetic_vocab(128256, true));
  return 0;
}
