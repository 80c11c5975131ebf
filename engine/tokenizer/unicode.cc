#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <iterator>

#include "engine/util/utf8.h"

namespace rill::unicode {
namespace {

struct CategoryRange {
  char32_t first;
  char32_t last;
  uint8_t value;
};
struct MappingEntry {
  char32_t cp;
  uint32_t offset;
  uint32_t length;
};
struct CompositionEntry {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "engine/tokenizer/unicode_tables.inc"

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

template <size_t N>
const CategoryRange* find_range(const CategoryRange (&table)[N], char32_t cp) {
  auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                             [](char32_t c, const CategoryRange& r) { return c < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? &*it : nullptr;
}

template <size_t N>
const MappingEntry* find_mapping(const MappingEntry (&table)[N], char32_t cp) {
  auto it = std::lower_bound(std::begin(table), std::end(table), cp,
                             [](const MappingEntry& e, char32_t c) { return e.cp < c; });
  return it != std::end(table) && it->cp == cp ? &*it : nullptr;
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions),
                             std::pair<char32_t, char32_t>{a, b},
                             [](const CompositionEntry& e, const std::pair<char32_t, char32_t>& k) {
                               return e.first != k.first ? e.first < k.first : e.second < k.second;
                             });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

void decompose_one(char32_t cp, bool compat, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const MappingEntry* e = compat ? find_mapping(kCompatDecomp, cp) : nullptr;
  if (e != nullptr) {
    out.append(kCompatDecomp_data + e->offset, e->length);
    return;
  }
  e = find_mapping(kCanonicalDecomp, cp);
  if (e != nullptr) {
    out.append(kCanonicalDecomp_data + e->offset, e->length);
    return;
  }
  out.push_back(cp);
}

// Decomposes and puts every run of non-starters in canonical (stable, by ccc) order.
std::u32string decompose(std::string_view s, bool compat) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) decompose_one(utf8::next(s, pos), compat, out);
  size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  return out;
}

// Canonical composition (Unicode 3.11, D117) over decomposed, canonically ordered input.
std::u32string compose(const std::u32string& d) {
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;
  uint8_t last_ccc = 0;
  for (char32_t cp : d) {
    const uint8_t ccc = combining_class(cp);
    if (starter != std::u32string::npos) {
      const bool adjacent = out.size() == starter + 1;
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const char32_t composite = compose_pair(out[starter], cp);
        if (composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  return out;
}

// Every code point below U+0300 is unchanged by NFC (no combining marks, all NFC_QC=Yes); in
// UTF-8 those are exactly the strings whose bytes are all below 0xCC.
bool below(std::string_view s, unsigned char limit) {
  return std::all_of(s.begin(), s.end(),
                     [limit](char c) { return static_cast<unsigned char>(c) < limit; });
}

}  // namespace

Category category(char32_t cp) {
  const CategoryRange* r = find_range(kCategoryRanges, cp);
  return r == nullptr ? Category::kCn : static_cast<Category>(r->value);
}

bool is_white_space(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool has_property(char32_t cp, CategoryMask mask) {
  if ((mask & kWhiteSpaceBit) != 0 && is_white_space(cp)) return true;
  return (mask & bit(category(cp))) != 0;
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CategoryRange* r = find_range(kCombiningClassRanges, cp);
  return r == nullptr ? 0 : r->value;
}

std::string nfd(std::string_view s) {
  if (below(s, 0xC0)) return std::string(s);
  return utf8::from_u32(decompose(s, /*compat=*/false));
}

std::string nfkd(std::string_view s) {
  if (below(s, 0x80)) return std::string(s);
  return utf8::from_u32(decompose(s, /*compat=*/true));
}

std::string nfc(std::string_view s) {
  if (below(s, 0xCC)) return std::string(s);
  return utf8::from_u32(compose(decompose(s, /*compat=*/false)));
}

std::string nfkc(std::string_view s) {
  if (below(s, 0x80)) return std::string(s);
  return utf8::from_u32(compose(decompose(s, /*compat=*/true)));
}

std::string to_lower(std::string_view s) {
  if (below(s, 0x80)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const char32_t cp = utf8::next(s, pos);
    const MappingEntry* e = find_mapping(kLowercase, cp);
    if (e == nullptr) {
      utf8::append(out, cp);
      continue;
    }
    for (uint32_t k = 0; k < e->length; ++k) utf8::append(out, kLowercase_data[e->offset + k]);
  }
  return out;
}

const char* tables_version() {
  return kUnicodeVersion;
}

}  // namespace rill::unicode
