#!/usr/bin/env python3
"""Trains small tokenizers with Hugging Face `tokenizers` and writes fixtures + goldens.

The goldens are the independent reference for rill's C++ tokenizer (engine/tokenizer/): every
expected id and decoded string below comes from the `tokenizers` library itself, except for the
llama2.c fixture, whose expected ids come from a line-by-line Python port of llama2.c's run.c
encode()/decode() (llama2.c's own algorithm is the reference there, not HF).

Usage (needs only `tokenizers`; no network):
    python3 tools/make_tokenizer_fixtures.py --text /path/to/tinyshakespeare.txt --out DIR
Then commit DIR/fixtures -> tests/fixtures/tokenizers/ and DIR/golden -> tests/golden/tokenizers/.

Output:
    DIR/fixtures/<style>/tokenizer.json + tokenizer_config.json   for the HF styles
    DIR/fixtures/llama2c/tokenizer.bin
    DIR/fixtures/variant_*/...  the optional components (NFKC, Lowercase, Strip, Digits, ...) on
                                the vocabularies above, with random texts added to their cases
    DIR/golden/<style>.json  {"tokenizer": "tests/fixtures/tokenizers/<style>", "vocab_size",
                              "bos_id", "eos_id", "cases": [{"text", "ids", "ids_no_special",
                              "decoded", "decoded_with_special"}], "decode_cases": [{"ids",
                              "decoded", "decoded_with_special"}]}
Deterministic: fixed training data, single-threaded training, sorted JSON keys.
"""
import argparse
import hashlib
import json
import os
import random
import re
import struct
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # deterministic training order

import tokenizers  # noqa: E402
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers, processors, trainers)

GPT2_STYLE_VOCAB = 1500
SP_TRAINED_VOCAB = 1200
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPIECE = "\u2581"

# A little non-English text mixed into training so that some non-ASCII characters and merges
# are in the vocabularies (Arabic, emoji and most CJK stay out: they exercise byte fallback).
EXTRA_TRAINING = [
    "Café au lait, crème brûlée, naïve façade, São Paulo, Zürich, España, mañana.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Schöne Grüße aus Köln.",
    "Привет, мир! Как дела? Москва, Санкт-Петербург, любовь и дружба.",
    "Καλημέρα κόσμε, η γλώσσα μου έδωσαν ελληνική.",
    "日本語のテキスト、東京と京都。",
]


def training_lines(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = [line for line in text.split("\n") if line.strip()]
    return text, lines + EXTRA_TRAINING * 20


def test_texts(corpus):
    """The strings every golden file covers."""
    long_text = corpus[5000:7000]
    if len(long_text) < 2000:
        long_text = (long_text + " The quick brown fox jumps over the lazy dog.") * 50
    long_text = long_text[:2000]
    return [
        "Hello world",
        "First Citizen:\nBefore we proceed any further, hear me speak.",
        "All:\nSpeak, speak.",
        "To be, or not to be, that is the question:",
        "O Romeo, Romeo! wherefore art thou Romeo?",
        "",
        " ",
        "  ",
        "a  b   c",
        "\n\n\t x",
        "trailing spaces   ",
        "   leading spaces",
        "line one\r\nline two\r\n",
        "tab\tseparated\tvalues",
        "12345 3.14159 1,000,000 and 2024-01-31",
        "I'm sure you're right, they'll say DON'T, it'S, we've, I'd, she'll",
        "Wait... what?! (yes) [no] {maybe} <tag> #hash @user $5 100% a&b *bold* ~x~",
        "!!!???...;;;---",
        "café naïve résumé über señor",
        "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
        "\u00c5ngstr\u00f6m vs A\u030angstro\u0308m, \ud55c\uad6d\uc5b4 vs \u1112\u1161\u11ab",
        "Καλημέρα κόσμε",
        "Привет, как дела?",
        "日本語のテキスト 中文 한국어",
        "مرحبا بالعالم",
        "emoji 👍 👍🏽 👩‍💻 🤖 🇫🇷 ❤️",
        "math: ∑ ∫ √2 ≠ ∞, arrows → ⇒, box ┌─┐",
        "<|endoftext|>hello",
        "hi<|endoftext|> there <|endoftext|>",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|>Hello<|end_of_text|>",
        "<s>hi</s>",
        "<s> hi </s> <unk>",
        "x    y     z",
        "def add(a, b):\n    return a + b  # sum\n\nprint(add(1, 2))\n",
        "for (int i = 0; i < n; ++i) { sum += v[i]; }",
        "MIXED case WoRdS And UPPERCASE SHOUTING",
        "zero\u200bwidth and non\u00a0breaking",
        long_text,
    ]


def decode_cases(tok, byte_ids, special_id):
    """Id sequences that decode to invalid or partial UTF-8. byte_ids[b] is the id of byte b."""
    e_acute = [byte_ids[0xC3], byte_ids[0xA9]]
    euro = [byte_ids[0xE2], byte_ids[0x82], byte_ids[0xAC]]
    seqs = [
        [byte_ids[0xC3]],
        e_acute,
        euro[:2],
        euro,
        [byte_ids[0x80]],
        [byte_ids[ord("a")], byte_ids[0xE2], byte_ids[ord("b")]],
        [byte_ids[0xF0], byte_ids[0x9F], byte_ids[0x91]],
        [byte_ids[0xFF], byte_ids[ord("x")]],
        euro[:2] + euro[1:] + [byte_ids[ord("!")]],
    ]
    if special_id is not None:
        seqs.append(euro[:1] + [special_id] + euro[1:])
        seqs.append([special_id] + e_acute)
    return [{"ids": s, "decoded": tok.decode(s, skip_special_tokens=True),
             "decoded_with_special": tok.decode(s, skip_special_tokens=False)} for s in seqs]


def golden_cases(tok, texts):
    cases = []
    for text in texts:
        ids = tok.encode(text).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=True),
            "decoded_with_special": tok.decode(ids, skip_special_tokens=False),
        })
    return cases


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


def save_hf(out, style, tok, config, texts, byte_ids=None, special_id=None):
    fixture_dir = os.path.join(out, "fixtures", style)
    os.makedirs(fixture_dir, exist_ok=True)
    tok.save(os.path.join(fixture_dir, "tokenizer.json"), pretty=False)
    write_json(os.path.join(fixture_dir, "tokenizer_config.json"), config)
    # Reload what was written, so the goldens describe the file exactly.
    tok = Tokenizer.from_file(os.path.join(fixture_dir, "tokenizer.json"))

    def token_id(name):
        if isinstance(name, dict):
            name = name["content"]
        return None if name is None else tok.token_to_id(name)

    golden = {
        "tokenizer": "tests/fixtures/tokenizers/" + style,
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": token_id(config.get("bos_token")),
        "eos_id": token_id(config.get("eos_token")),
        "cases": golden_cases(tok, texts),
        "decode_cases": decode_cases(tok, byte_ids, special_id) if byte_ids else [],
    }
    write_json(os.path.join(out, "golden", style + ".json"), golden)
    size = os.path.getsize(os.path.join(fixture_dir, "tokenizer.json"))
    print("%-10s vocab %5d  tokenizer.json %6d bytes" % (style, golden["vocab_size"], size))


def byte_level_ids(tok):
    alphabet = {}
    for b, ch in enumerate(bytes_to_unicode()):
        alphabet[b] = tok.token_to_id(ch)
    assert all(v is not None for v in alphabet.values()), "byte-level alphabet not in vocab"
    return alphabet


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def train_byte_level(lines, pre_tokenizer, specials, normalizer=None):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=GPT2_STYLE_VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def with_model_options(tok, **options):
    """Rebuilds the tokenizer from its JSON with model fields overridden (e.g. ignore_merges)."""
    data = json.loads(tok.to_str())
    data["model"].update(options)
    return Tokenizer.from_str(json.dumps(data))


def make_gpt2(lines, texts, out):
    tok = train_byte_level(lines, pre_tokenizers.ByteLevel(add_prefix_space=False),
                           ["<|endoftext|>"])
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024}
    save_hf(out, "gpt2", tok, config, texts, byte_level_ids(tok), tok.token_to_id("<|endoftext|>"))


def make_llama3(lines, texts, out):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train_byte_level(lines, pre, ["<|begin_of_text|>", "<|end_of_text|>"])
    tok = with_model_options(tok, ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}
    save_hf(out, "llama3", tok, config, texts, byte_level_ids(tok), bos)


def make_qwen2(lines, texts, out):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train_byte_level(lines, pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                           normalizer=normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"bos_token": None, "eos_token": "<|endoftext|>",
              "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 32768}
    save_hf(out, "qwen2", tok, config, texts, byte_level_ids(tok), tok.token_to_id("<|im_end|>"))


def make_neox(lines, texts, out):
    tok = train_byte_level(lines, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True),
                           ["<|endoftext|>"], normalizer=normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    # GPT-NeoX has non-special added tokens for runs of spaces, matched on normalized text.
    tok.add_tokens([AddedToken("  ", normalized=True, special=False),
                    AddedToken("    ", normalized=True, special=False)])
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "tokenizer_class": "GPTNeoXTokenizer", "model_max_length": 2048}
    save_hf(out, "neox", tok, config, texts, byte_level_ids(tok), tok.token_to_id("<|endoftext|>"))


def train_sentencepiece_style(lines):
    """Vocab (<unk>, <s>, </s>, <0x00>..<0xFF>, trained pieces) and merges, Llama-2 layout."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE),
                                           normalizers.Replace(" ", SPIECE)])
    # Words start with the meta-space, so merges never cross word boundaries (as SentencePiece).
    tok.pre_tokenizer = pre_tokenizers.Split(SPIECE, behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=SP_TRAINED_VOCAB, show_progress=False)
    tok.train_from_iterator(lines, trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in trained["merges"]]
    return vocab, merges


def sentencepiece_tokenizer(vocab, merges, metaspace):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE, prepend_scheme="first",
                                                     split=False)
        tok.decoder = decoders.Metaspace(replacement=SPIECE, prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE),
                                               normalizers.Replace(" ", SPIECE)])
        tok.decoder = decoders.Sequence([decoders.Replace(SPIECE, " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<s>", "</s>")])
    return tok


def make_sentencepiece_styles(vocab, merges, texts, out):
    byte_ids = {b: 3 + b for b in range(256)}
    config = {"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False,
                            "normalized": False, "rstrip": False, "single_word": False},
              "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "tokenizer_class": "LlamaTokenizerFast", "model_max_length": 4096}
    save_hf(out, "llama2_sp", sentencepiece_tokenizer(vocab, merges, False), config, texts,
            byte_ids, 2)
    save_hf(out, "metaspace", sentencepiece_tokenizer(vocab, merges, True), config, texts,
            byte_ids, 2)


# ---- llama2.c: tokenizer.bin and a faithful port of run.c's encode() / decode() -------------

def llama2c_pieces(vocab, merges):
    """Pieces in id order as llama2.c's export writes them, with scores (-merge rank)."""
    rank_of = {}
    for rank, (a, b) in enumerate(merges):
        rank_of.setdefault(a + b, rank)
    pieces, scores = [], []
    for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        score = float(-rank_of[piece]) if piece in rank_of else 0.0
        if piece == "<s>":
            piece = "\n<s>\n"
        elif piece == "</s>":
            piece = "\n</s>\n"
        pieces.append(piece.replace(SPIECE, " ").encode("utf-8"))
        scores.append(struct.unpack("<f", struct.pack("<f", score))[0])  # float32 as stored
    return pieces, scores


def write_llama2c_bin(path, pieces, scores):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for piece, score in zip(pieces, scores):
            f.write(struct.pack("<fi", score, len(piece)))
            f.write(piece)


def llama2c_encode(pieces, scores, text, bos):
    """run.c encode(): dummy prefix, per-code-point lookup, byte fallback (+3), greedy merges."""
    lookup = {}
    for i, p in enumerate(pieces):
        lookup.setdefault(p, i)
    data = text.encode("utf-8")
    tokens = [1] if bos else []
    if data:
        tokens.append(lookup.get(b" ", ord(" ") + 3))
    buf = bytearray()
    for i, c in enumerate(data):
        if (c & 0xC0) != 0x80:
            buf = bytearray()
        buf.append(c)
        nxt = data[i + 1] if i + 1 < len(data) else 0
        if (nxt & 0xC0) == 0x80 and len(buf) < 4:
            continue
        tid = lookup.get(bytes(buf))
        if tid is not None:
            tokens.append(tid)
        else:
            tokens.extend(b + 3 for b in buf)
        buf = bytearray()
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for i in range(len(tokens) - 1):
            tid = lookup.get(pieces[tokens[i]] + pieces[tokens[i + 1]])
            if tid is not None and scores[tid] > best_score:
                best_score, best_id, best_idx = scores[tid], tid, i
        if best_idx == -1:
            break
        tokens[best_idx] = best_id
        del tokens[best_idx + 1]
    return tokens


def llama2c_decode(pieces, ids, skip_special):
    """run.c decode() per token, concatenated; specials 0-2 dropped when skip_special."""
    out = bytearray()
    for i, t in enumerate(ids):
        if not 0 <= t < len(pieces) or (skip_special and t in (0, 1, 2)):
            continue
        piece = pieces[t]
        if i > 0 and ids[i - 1] == 1 and piece[:1] == b" ":
            piece = piece[1:]
        m = re.match(rb"<0x([0-9A-Fa-f]{1,2})", piece)
        if m:
            out.append(int(m.group(1), 16))
        else:
            out += piece
    return out.decode("utf-8", errors="replace")


def make_llama2c(vocab, merges, texts, out):
    pieces, scores = llama2c_pieces(vocab, merges)
    write_llama2c_bin(os.path.join(out, "fixtures", "llama2c", "tokenizer.bin"), pieces, scores)
    cases = []
    for text in texts:
        ids = llama2c_encode(pieces, scores, text, True)
        cases.append({"text": text, "ids": ids,
                      "ids_no_special": llama2c_encode(pieces, scores, text, False),
                      "decoded": llama2c_decode(pieces, ids, True),
                      "decoded_with_special": llama2c_decode(pieces, ids, False)})
    seqs = [[3 + 0xC3], [3 + 0xE2, 3 + 0x82], [3 + 0xE2, 3 + 0x82, 3 + 0xAC], [1, 3 + 0x41],
            [3 + 0x80, 3 + ord("a")], [1, vocab[SPIECE + "t"] if SPIECE + "t" in vocab else 3]]
    golden = {
        "tokenizer": "tests/fixtures/tokenizers/llama2c/tokenizer.bin",
        "vocab_size": len(pieces), "bos_id": 1, "eos_id": 2, "cases": cases,
        "decode_cases": [{"ids": s, "decoded": llama2c_decode(pieces, s, True),
                          "decoded_with_special": llama2c_decode(pieces, s, False)} for s in seqs],
    }
    write_json(os.path.join(out, "golden", "llama2c.json"), golden)
    print("%-10s vocab %5d  tokenizer.bin" % ("llama2c", len(pieces)))


# ---- variants: the less common components, on the trained vocabularies above ---------------

FUZZ_POOL = ["hello", "Hello", "HELLO", "the", "The", "THE", " ", "  ", "   ", "\n", "\t", "123",
             "45678", "3.14", "x", "xx", "'s", "don't", "!!", "?", "...", ",", "(", ")", "-", "\u00e9",
             "e\u0301", "\u00dc", "\u00df", "\u0130", "\u03a3\u0391\u03a3", "\ufb01", "\u2460",
             "\u00bd", "\u4e2d\u6587", "\U0001F44D", "<mask>", " <mask> ", "ab", " ab", "cab", "e", "ee",
             "beer", SPIECE, "\u00a0", "\u3000", "a", "aaa", "Ab", "<|endoftext|>"]


def fuzz_texts(seed, count=150):
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(0, 10))) for _ in range(count)]


def make_variants(out):
    """Pipelines with the optional normalizers / pre-tokenizers / decoders / post-processors."""
    def byte_level():
        return Tokenizer.from_file(os.path.join(out, "fixtures", "gpt2", "tokenizer.json"))

    def sentencepiece():
        return Tokenizer.from_file(os.path.join(out, "fixtures", "llama2_sp", "tokenizer.json"))

    t = byte_level()
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                         normalizers.Strip(left=True, right=True),
                                         normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Punctuation("contiguous"),
        pre_tokenizers.Split(Regex(r"\s+"), "merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    yield "variant_normalizers", t

    t = byte_level()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split("e", "merged_with_next"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True,
                                     normalized=False)])
    t.add_tokens([AddedToken("hello", single_word=True, normalized=True),
                  AddedToken("ab", normalized=True, lstrip=True)])
    yield "variant_added_tokens", t

    t = byte_level()
    eot = t.token_to_id("<|endoftext|>")
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Split(Regex("[aeiou]"), "contiguous", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.post_processor = processors.RobertaProcessing(("<|endoftext|>", eot), ("<|endoftext|>", eot))
    yield "variant_whitespace", t

    t = byte_level()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(), pre_tokenizers.CharDelimiterSplit("x"),
        pre_tokenizers.Split(Regex(r"(?i:the)|\d{2,3}"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    # (Strip with stop > 0 is left out: tokenizers panics on empty tokens there.)
    t.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace("a", "A"),
                                   decoders.Strip("A", 1, 0)])
    yield "variant_bert_split", t

    t = sentencepiece()
    t.normalizer = normalizers.Lowercase()
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE, prepend_scheme="always", split=True)
    t.decoder = decoders.Metaspace(replacement=SPIECE, prepend_scheme="always", split=True)
    yield "variant_metaspace_always", t


def save_variants(texts, out):
    for index, (style, tok) in enumerate(make_variants(out)):
        is_sp = style == "variant_metaspace_always"
        byte_ids = {b: 3 + b for b in range(256)} if is_sp else byte_level_ids(tok)
        save_hf(out, style, tok, {}, texts + fuzz_texts(index), byte_ids,
                tok.token_to_id("</s>" if is_sp else "<|endoftext|>"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", required=True, help="training text (tinyshakespeare.txt)")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args()
    corpus, lines = training_lines(args.text)
    texts = test_texts(corpus)
    print("tokenizers %s, python %s, text sha256 %s" % (
        tokenizers.__version__, sys.version.split()[0],
        hashlib.sha256(corpus.encode("utf-8")).hexdigest()[:16]))
    make_gpt2(lines, texts, args.out)
    make_llama3(lines, texts, args.out)
    make_qwen2(lines, texts, args.out)
    make_neox(lines, texts, args.out)
    vocab, merges = train_sentencepiece_style(lines)
    make_sentencepiece_styles(vocab, merges, texts, args.out)
    make_llama2c(vocab, merges, texts, args.out)
    save_variants(texts, args.out)


if __name__ == "__main__":
    main()
