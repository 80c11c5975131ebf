// ChatTemplate: loading from a model directory (chat_template.jinja, tokenizer_config.json with
// a string or a list of named templates, special tokens as strings or AddedToken objects), the
// default model's template, options (tools, extra variables) and error reporting.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

const fs::path kRoot = RILL_SOURCE_DIR;

class TempModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rill_chat_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST(ChatTemplateShakespeare, DefaultModelHasATemplate) {
  const ChatTemplate t = ChatTemplate::from_model_dir(kRoot / "models" / "rill-shakespeare");
  EXPECT_EQ(t.bos_token(), "<|endoftext|>");
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "A street in Verona."},
    {"role": "user", "content": " Wherefore art thou? "},
    {"role": "assistant", "content": "Here, love."},
    {"role": "user", "name": "Nurse", "content": [{"type": "text", "text": "Madam!"}, {"type": "image"}]}
  ])");
  const std::string scene =
      "<|endoftext|>A street in Verona.\n\nJULIET:\nWherefore art thou?\n\nROMEO:\nHere, "
      "love.\n\nNURSE:\nMadam!\n\n";
  EXPECT_EQ(t.render(messages), scene);
  ChatTemplateOptions options;
  options.add_generation_prompt = true;
  EXPECT_EQ(t.render(messages, options), scene + "ROMEO:\n");
}

TEST(ChatTemplateShakespeare, UnknownRoleIsAClearError) {
  const ChatTemplate t = ChatTemplate::from_model_dir(kRoot / "models" / "rill-shakespeare");
  try {
    t.render(ordered_json::parse(R"([{"role": "tool", "content": "x"}])"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "rill-shakespeare has no speaker for the role 'tool' (use system, user or "
                 "assistant)");
  }
}

TEST_F(TempModelDir, TokenizerConfigStringTemplateAndAddedTokens) {
  write("tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false, "special": true},
    "eos_token": "</s>", "unk_token": "<unk>",
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}{{ unk_token }}"
  })");
  const ChatTemplate t = ChatTemplate::from_model_dir(dir_);
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  EXPECT_EQ(t.render(json::parse(R"([{"role": "user", "content": "hi"}])")), "<s>hi</s><unk>");
}

TEST_F(TempModelDir, ListOfTemplatesUsesDefault) {
  write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "tools"},
    {"name": "default", "template": "default {{ messages | length }}"}]})");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_).render(json::array()), "default 0");
}

TEST_F(TempModelDir, ListWithoutDefaultIsAnError) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_THROW(ChatTemplate::from_model_dir(dir_), Error);
}

TEST_F(TempModelDir, ChatTemplateJinjaFileWins) {
  write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "from config"})");
  write("chat_template.jinja", "from file{{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_).render(json::array()), "from file</s>");
}

TEST_F(TempModelDir, NoTemplateIsInvalidArgument) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  try {
    ChatTemplate::from_model_dir(dir_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos);
  }
}

TEST(ChatTemplateRender, ToolsDocumentsAndExtraVariables) {
  const ChatTemplate t(
      "{{ tools is none }} {{ documents is none }} {{ tools | tojson if tools }}"
      "{{ enable_thinking }} {{ add_generation_prompt }}");
  ChatTemplateOptions options;
  options.extra = {{"enable_thinking", false}};
  EXPECT_EQ(t.render(json::array(), options), "True True False False");
  options.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  options.add_generation_prompt = true;
  EXPECT_EQ(t.render(json::array(), options),
            R"(False True [{"type": "function", "function": {"name": "f"}}]False True)");
}

TEST(ChatTemplateRender, OrderedJsonKeepsKeyOrder) {
  const ChatTemplate t("{{ messages[0] | tojson }}");
  const std::string text = R"([{"role": "user", "content": "x"}])";
  EXPECT_EQ(t.render(ordered_json::parse(text)), R"({"role": "user", "content": "x"})");
  // nlohmann::json sorts keys, as documented in chat_template.h.
  EXPECT_EQ(t.render(json::parse(text)), R"({"content": "x", "role": "user"})");
}

TEST(ChatTemplateRender, MessagesMustBeAList) {
  EXPECT_THROW(ChatTemplate("x").render(json::object()), Error);
}

TEST(ChatTemplateRender, BosTokenUndefinedWhenTheModelHasNone) {
  EXPECT_EQ(ChatTemplate("{{ bos_token is defined }}[{{ bos_token }}]").render(json::array()),
            "False[]");
}

}  // namespace
}  // namespace rill
