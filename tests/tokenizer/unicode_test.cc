#include "engine/tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace rill {
namespace {

using unicode::Category;

TEST(Unicode, GeneralCategory) {
  EXPECT_EQ(unicode::category('A'), Category::kLu);
  EXPECT_EQ(unicode::category('z'), Category::kLl);
  EXPECT_EQ(unicode::category('7'), Category::kNd);
  EXPECT_EQ(unicode::category(' '), Category::kZs);
  EXPECT_EQ(unicode::category('\n'), Category::kCc);
  EXPECT_EQ(unicode::category('!'), Category::kPo);
  EXPECT_EQ(unicode::category('$'), Category::kSc);
  EXPECT_EQ(unicode::category(0x00E9), Category::kLl);   // é
  EXPECT_EQ(unicode::category(0x0301), Category::kMn);   // combining acute
  EXPECT_EQ(unicode::category(0x4E2D), Category::kLo);   // 中
  EXPECT_EQ(unicode::category(0x00B2), Category::kNo);   // ²
  EXPECT_EQ(unicode::category(0x2163), Category::kNl);   // Ⅳ
  EXPECT_EQ(unicode::category(0x1F44D), Category::kSo);  // 👍
  EXPECT_EQ(unicode::category(0x1F3FD), Category::kSk);  // skin tone modifier
  EXPECT_EQ(unicode::category(0x200D), Category::kCf);   // ZWJ
  EXPECT_EQ(unicode::category(0xE000), Category::kCo);
  EXPECT_EQ(unicode::category(0x10FFFF), Category::kCn);
  EXPECT_TRUE(unicode::is_letter(0x0416));  // Ж
  EXPECT_TRUE(unicode::is_number(0x0663));  // Arabic-Indic 3
}

TEST(Unicode, WhiteSpace) {
  for (char32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                     0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(unicode::is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (char32_t c : {0x1Cu, 0x1Fu, 0x200Bu, 0x180Eu, 0xFEFFu, 0x41u}) {
    EXPECT_FALSE(unicode::is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(Unicode, NfcComposes) {
  EXPECT_EQ(unicode::nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(unicode::nfc("A\u030A"), "\u00C5");
  EXPECT_EQ(unicode::nfc("\u212B"), "\u00C5");              // singleton: Angstrom sign
  EXPECT_EQ(unicode::nfc("\u1112\u1161\u11AB"), "\uD55C");  // Hangul L V T -> 한
  EXPECT_EQ(unicode::nfc("\u1112\u1161"), "\uD558");        // L V -> 하
  EXPECT_EQ(unicode::nfc("\uD55C"), "\uD55C");
  EXPECT_EQ(unicode::nfc("a\u0323\u0302"), "\u1EAD");  // ậ, either mark order
  EXPECT_EQ(unicode::nfc("a\u0302\u0323"), "\u1EAD");
  EXPECT_EQ(unicode::nfc("\u1E0B\u0323"), "\u1E0D\u0307");   // reordering then recomposition
  EXPECT_EQ(unicode::nfc("\u0958"), "\u0915\u093C");         // composition exclusion
  EXPECT_EQ(unicode::nfc("e\u0301\u0301"), "\u00E9\u0301");  // second mark blocked
  EXPECT_EQ(unicode::nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(unicode::nfc("\u00E9t\u00E9"), "\u00E9t\u00E9");
}

TEST(Unicode, OtherForms) {
  EXPECT_EQ(unicode::nfd("\u00E9"), "e\u0301");
  EXPECT_EQ(unicode::nfd("\uD55C"), "\u1112\u1161\u11AB");
  EXPECT_EQ(unicode::nfkc("\uFB01"), "fi");
  EXPECT_EQ(unicode::nfkc("\u2460"), "1");
  EXPECT_EQ(unicode::nfkc("\u00BD"), "1\u20442");
  EXPECT_EQ(unicode::nfkd("\u00C5"), "A\u030A");
  EXPECT_EQ(unicode::combining_class(0x0301), 230);
  EXPECT_EQ(unicode::combining_class(0x0323), 220);
  EXPECT_EQ(unicode::combining_class('a'), 0);
}

TEST(Unicode, Lowercase) {
  EXPECT_EQ(unicode::to_lower("HeLLo World"), "hello world");
  EXPECT_EQ(unicode::to_lower("\u00C9T\u00C9"), "\u00E9t\u00E9");
  EXPECT_EQ(unicode::to_lower("\u039F\u0394\u039F\u03A3"),
            "\u03BF\u03B4\u03BF\u03C3");  // per char: no final ς
  EXPECT_EQ(unicode::to_lower("\u03A3"), "\u03C3");
  EXPECT_EQ(unicode::to_lower("\u0130"), "i\u0307");
}

}  // namespace
}  // namespace rill
