#!/usr/bin/env python3
"""Writes tests/fixtures/grammar/regex_cases.json: patterns of the supported subset and strings,
each with Python re.fullmatch(..., re.ASCII) (the reference for regex_test.cc)."""
import json
import os
import re

PATTERNS = [
    r"abc", r"a|bc|", r"(ab|c)*d{2,3}[x-z]?", r"[^a]{0,3}b", r"\d+(\.\d{1,2})?", r"[A-Za-z_]\w*",
    r"(?:ab){2,}", r"a{,2}b", r"x?y+z*", r"[\-+]?[0-9]+", r"(\s|,)+", r"[^\d\s]+", r"\x41\u00e9.",
    r"^[a-c]{3}$", r".{2}", r"(a|b)(c|d)?e", r"[]a]+", r"[a\]]b", r"\(\)\[\]\{\}\.\*", r"é+|ü",
    r"[à-ö]{1,2}", r"(?P<n>a+)b", r"a*?b", r"[\w.]+@[\w]+\.com", r"(0|[1-9][0-9]*)", r"\W\S\D",
    r"[^\n]*", r"[a-f0-9]{4}-[a-f0-9]{2}", r"(a(b(c)?)?)?d",
]
STRINGS = [
    "", "a", "b", "ab", "abc", "bc", "abab", "ababab", "dd", "ddd", "dddd", "cddx", "abcdd", "ccdddz",
    "b", "xxb", "xxxb", "xxxxb", "ab", "1", "12", "1.5", "1.55", "1.555", "x.5", "_a1", "1a", "aab",
    "aaab", "y", "xyyzz", "xz", "-12", "+0", "--1", " ,\t", "ab!", "Aé\n", "Aéz", "abc", "ab", "é", "éé",
    "ü", "àö", "ã", "aab", "b", "aaab", "a.b@x.com", "a@b.org", "0", "007", "105", "!a!", "x x",
    "line\nbreak", "00ff-1a", "00fg-1a", "abcd", "abd", "ad", "d", "][a", "]b", "()[]{}.*", "?",
]


def main():
    cases = []
    for p in PATTERNS:
        for s in STRINGS:
            cases.append({"pattern": p, "text": s, "match": re.fullmatch(p, s, re.ASCII) is not None})
    out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "grammar", "regex_cases.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
