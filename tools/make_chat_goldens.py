#!/usr/bin/env python3
"""Expected chat-template renderings for Rill's ChatTemplate golden test.

For every template tests/fixtures/chat_templates/<name>.jinja (special tokens in <name>.json)
and every conversation in conversations.json, with add_generation_prompt false and true, records
what transformers' apply_chat_template(..., tokenize=False) returns, or the exception it raises
(type and message). Offline; needs only transformers + tokenizers (any tokenizer works since
nothing is tokenized: models/rill-shakespeare/tokenizer.json is used).

    python3 tools/make_chat_goldens.py --fixtures tests/fixtures/chat_templates \
        --out tests/golden/chat_templates.json

--backend jinja2 renders with plain jinja2 configured the way transformers configures it
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception, strftime_now, a pass-through {% generation %}); the file is then marked
"generator": "jinja2-provisional" and should be regenerated with transformers.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(REPO, "models", "rill-shakespeare", "tokenizer.json")


def load_fixtures(fixtures):
    templates = []
    for entry in sorted(os.listdir(fixtures)):
        if not entry.endswith(".jinja"):
            continue
        name = entry[: -len(".jinja")]
        with open(os.path.join(fixtures, entry), encoding="utf-8") as f:
            source = f.read()
        with open(os.path.join(fixtures, name + ".json"), encoding="utf-8") as f:
            meta = json.load(f)
        templates.append((name, source, meta))
    with open(os.path.join(fixtures, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]
    return templates, conversations


def applies(meta, conversation):
    need = conversation.get("requires_tools")
    if need is None:
        return True
    return bool(meta.get("supports_tools")) and meta.get("tool_arguments") == need


def transformers_renderer():
    import transformers
    from transformers import PreTrainedTokenizerFast

    def render(source, meta, conversation, add_generation_prompt):
        special = {k: meta[k] for k in ("bos_token", "eos_token") if meta.get(k) is not None}
        tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, chat_template=source, **special)
        return tok.apply_chat_template(
            conversation["messages"], tools=conversation.get("tools"), tokenize=False,
            add_generation_prompt=add_generation_prompt, **conversation.get("extra", {}))

    return render, "transformers " + transformers.__version__


def jinja2_environment():
    """jinja2 set up the way transformers' chat_template_utils sets it up."""
    from datetime import datetime

    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # transformers' AssistantTracker, minus the tracking
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def jinja2_renderer():
    env = jinja2_environment()

    def render(source, meta, conversation, add_generation_prompt):
        special = {k: meta[k] for k in ("bos_token", "eos_token") if meta.get(k) is not None}
        kwargs = {**special, **conversation.get("extra", {})}
        return env.from_string(source).render(
            messages=conversation["messages"], tools=conversation.get("tools"), documents=None,
            add_generation_prompt=add_generation_prompt, **kwargs)

    return render, "jinja2-provisional"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", default=os.path.join(REPO, "tests/fixtures/chat_templates"))
    parser.add_argument("--out", default=os.path.join(REPO, "tests/golden/chat_templates.json"))
    parser.add_argument("--backend", choices=["transformers", "jinja2"], default="transformers")
    args = parser.parse_args()

    render, generator = (transformers_renderer() if args.backend == "transformers"
                         else jinja2_renderer())
    templates, conversations = load_fixtures(args.fixtures)
    cases = []
    for name, source, meta in templates:
        for conversation in conversations:
            if not applies(meta, conversation):
                continue
            for add_generation_prompt in (False, True):
                case = {"template": name, "conversation": conversation["name"],
                        "add_generation_prompt": add_generation_prompt}
                try:
                    case["output"] = render(source, meta, conversation, add_generation_prompt)
                except Exception as e:  # the template's own error is part of the expectation
                    case["error_type"] = type(e).__name__
                    case["error"] = str(e)
                cases.append(case)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"generator": generator, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{args.out}: {len(cases)} cases ({errors} errors) from {generator}", file=sys.stderr)


if __name__ == "__main__":
    main()
