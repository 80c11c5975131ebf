"""A model directory whose greedy (and sampled) reply is a fixed text, for end-to-end tests of
tool calling: the default model cannot write a tool call, and the server has no way to force
one, so the tests serve a model built to write exactly the reply under test.

The model is the default model's tokenizer with the reply's pieces as added tokens, and a
one-layer Llama whose attention and MLP are zero: the residual stream is the current token's
embedding, so the next token depends on the current one alone (a bigram table). Every ordinary
token leads to the reply's first piece, each piece to the next, the last to EOS. With a logit
margin of 32 the chain is followed whatever the sampling settings. The chat template is one of
tests/fixtures/chat_templates, so the server renders (and detects the tool-call family from) a
published template."""
import json
import os
import shutil
import struct

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
BASE = os.path.join(SOURCE_DIR, "models/rill-shakespeare")
HIDDEN = 64
MARGIN = 4.0  # lm_head weight: the normalized state is sqrt(HIDDEN) = 8, so logits 32 vs 0


def _bf16(values):
    out = bytearray()
    for v in values:
        out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)[:2]
    return bytes(out)


def _write_safetensors(path, tensors):
    """tensors: [(name, shape, bf16 bytes)]."""
    header, offset, blobs = {}, 0, []
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)


def _matrix(rows, cols, ones):
    """rows x cols bf16 zeros with 1.0 (or MARGIN) at the (row, col, value) triples in `ones`."""
    data = bytearray(rows * cols * 2)
    for r, c, v in ones:
        data[(r * cols + c) * 2:(r * cols + c) * 2 + 2] = _bf16([v])
    return bytes(data)


def make_model(directory, template, pieces, special_pieces=()):
    """Writes the model to `directory`: chat template tests/fixtures/chat_templates/<template>.jinja
    (with its .json's bos/eos tokens), replying "".join(pieces) then EOS. Pieces in
    `special_pieces` are special added tokens (decoded only with skip_special_tokens false)."""
    assert len(pieces) < HIDDEN
    os.makedirs(directory, exist_ok=True)
    tok = json.load(open(os.path.join(BASE, "tokenizer.json")))
    base_vocab = len(tok["model"]["vocab"])
    ids = []
    for i, piece in enumerate(pieces):
        ids.append(base_vocab + i)
        tok["added_tokens"].append({"id": base_vocab + i, "content": piece, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": piece in special_pieces})
    vocab = base_vocab + len(pieces)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    meta = json.load(open(os.path.join(SOURCE_DIR, "tests/fixtures/chat_templates", template + ".json")))
    tok_config = {"tokenizer_class": "TokenizersBackend", "model_max_length": 4096,
                  "bos_token": meta.get("bos_token") or "<|endoftext|>",
                  "eos_token": meta.get("eos_token") or "<|endoftext|>"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f)
    shutil.copy(os.path.join(SOURCE_DIR, "tests/fixtures/chat_templates", template + ".jinja"),
                os.path.join(directory, "chat_template.jinja"))
    config = json.load(open(os.path.join(BASE, "config.json")))
    config.update({"hidden_size": HIDDEN, "intermediate_size": HIDDEN, "num_hidden_layers": 1,
                   "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": HIDDEN, "vocab_size": vocab,
                   "tie_word_embeddings": False, "max_position_embeddings": 4096})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 0}, f)
    # State 0: every ordinary token; state i + 1: piece i. Each state's successor: the next piece.
    embed = [(t, 0, 1.0) for t in range(vocab) if t not in ids] + [(t, i + 1, 1.0) for i, t in enumerate(ids)]
    head = [(ids[0], 0, MARGIN)] + [(ids[i + 1], i + 1, MARGIN) for i in range(len(ids) - 1)] + \
        [(0, len(ids), MARGIN)]
    zeros = lambda r, c: bytes(r * c * 2)
    ones = _bf16([1.0] * HIDDEN)
    layer = "model.layers.0."
    _write_safetensors(os.path.join(directory, "model.safetensors"), [
        ("model.embed_tokens.weight", [vocab, HIDDEN], _matrix(vocab, HIDDEN, embed)),
        (layer + "input_layernorm.weight", [HIDDEN], ones),
        (layer + "self_attn.q_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "self_attn.k_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "self_attn.v_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "self_attn.o_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "post_attention_layernorm.weight", [HIDDEN], ones),
        (layer + "mlp.gate_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "mlp.up_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        (layer + "mlp.down_proj.weight", [HIDDEN, HIDDEN], zeros(HIDDEN, HIDDEN)),
        ("model.norm.weight", [HIDDEN], ones),
        ("lm_head.weight", [vocab, HIDDEN], _matrix(vocab, HIDDEN, head)),
    ])
    return directory
