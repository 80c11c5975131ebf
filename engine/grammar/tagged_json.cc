#include "engine/grammar/tagged_json.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"

namespace rill::grammar {

using ojson = nlohmann::ordered_json;

int32_t add_tagged_json(Grammar& g, std::string_view document, const GrammarLimits& limits) {
  // The document wraps each schema in three levels.
  if (text_depth(document, kMaxSchemaDepth + 3) > kMaxSchemaDepth + 3)
    fail("tagged_json: nesting deeper than the limit of " + std::to_string(kMaxSchemaDepth));
  const ojson doc = ojson::parse(document, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) fail("tagged_json: the document must be a JSON object");
  const auto alts = doc.find("alternatives");
  if (alts == doc.end() || !alts->is_array() || alts->empty())
    fail("tagged_json: 'alternatives' must be a non-empty array");
  std::vector<int32_t> branches;
  for (const ojson& a : *alts) {
    const auto tag = a.find("tag");
    const auto schema = a.find("schema");
    if (!a.is_object() || tag == a.end() || !tag->is_string() || schema == a.end())
      fail("tagged_json: each alternative needs a string 'tag' and a 'schema'");
    const int32_t value = add_json_schema(g, schema->dump(), limits);
    branches.push_back(g.seq({g.literal(tag->get<std::string>()), g.ref(value)}));
  }
  const int32_t item = g.add_rule("tagged_item");
  g.define(item, g.choice(std::move(branches)));
  std::string separator;
  if (const auto s = doc.find("separator"); s != doc.end()) {
    if (!s->is_string()) fail("tagged_json: 'separator' must be a string");
    separator = s->get<std::string>();
  }
  int32_t more_max = -1;  // values after the first: unbounded
  if (const auto m = doc.find("max_items"); m != doc.end()) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > limits.max_repeat)
      fail("tagged_json: 'max_items' must be an integer from 1 to " +
           std::to_string(limits.max_repeat));
    more_max = static_cast<int32_t>(m->get<int64_t>()) - 1;
  }
  if (more_max == 0) return item;
  const int32_t rule = g.add_rule("tagged_json");
  const int32_t more = g.seq({g.literal(separator), g.ref(item)});
  g.define(rule, g.seq({g.ref(item), g.repeat(more, 0, more_max)}));
  return rule;
}

}  // namespace rill::grammar
