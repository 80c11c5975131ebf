// Golden test: every template in tests/fixtures/chat_templates rendered with every conversation
// must equal, byte for byte, what transformers' apply_chat_template produced
// (tests/golden/chat_templates.json, made by tools/make_chat_goldens.py). Where transformers
// raised, ChatTemplate must throw kInvalidArgument with the same message: exactly for the
// template's raise_exception, after the "chat template line N: " prefix for other errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/error.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

const fs::path kRoot = RILL_SOURCE_DIR;
const fs::path kFixtures = kRoot / "tests" / "fixtures" / "chat_templates";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json read_json(const fs::path& p) { return ordered_json::parse(read(p)); }

std::string optional_string(const ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : std::string();
}

TEST(ChatTemplateGolden, MatchesTransformers) {
  const ordered_json golden = read_json(kRoot / "tests" / "golden" / "chat_templates.json");
  const ordered_json conversations = read_json(kFixtures / "conversations.json")["conversations"];
  std::map<std::string, ordered_json> by_name;
  for (const auto& c : conversations) by_name[c["name"].get<std::string>()] = c;
  std::map<std::string, ChatTemplate> templates;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().stem().string();
    const ordered_json meta = read_json(kFixtures / (name + ".json"));
    templates.emplace(name, ChatTemplate(read(entry.path()), optional_string(meta["bos_token"]),
                                         optional_string(meta["eos_token"])));
  }
  ASSERT_GE(templates.size(), 10u);
  size_t checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string tname = c["template"];
    const std::string cname = c["conversation"];
    SCOPED_TRACE(tname + " / " + cname + " / add_generation_prompt=" +
                 c["add_generation_prompt"].dump());
    ASSERT_TRUE(templates.count(tname)) << "no fixture for template " << tname;
    ASSERT_TRUE(by_name.count(cname)) << "no conversation " << cname;
    const ordered_json& conv = by_name[cname];
    ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (conv.contains("tools")) options.tools = conv["tools"];
    if (conv.contains("extra")) options.extra = conv["extra"];
    ++checked;
    if (c.contains("output")) {
      try {
        EXPECT_EQ(templates.at(tname).render(conv["messages"], options),
                  c["output"].get<std::string>());
      } catch (const Error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
      }
      continue;
    }
    const std::string expected = c["error"];
    try {
      const std::string out = templates.at(tname).render(conv["messages"], options);
      ADD_FAILURE() << "expected error '" << expected << "', rendered:\n" << out;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string got = e.what();
      if (c["error_type"] == "TemplateError") {
        EXPECT_EQ(got, expected);
      } else {
        EXPECT_EQ(got.substr(got.find(": ") + 2), expected) << got;
        EXPECT_EQ(got.rfind("chat template line ", 0), 0u) << got;
      }
    }
  }
  EXPECT_EQ(checked, golden["cases"].size());
  EXPECT_GT(checked, 100u);
}

}  // namespace
}  // namespace rill
