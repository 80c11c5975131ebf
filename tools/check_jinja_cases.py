#!/usr/bin/env python3
"""Checks the Jinja construct cases (tests/fixtures/jinja_cases.json) against jinja2 itself.

Each case is a template rendered with no messages and `vars` as extra variables, exactly as
tests/chat/jinja_cases_test.cc renders it with Rill's interpreter; its expected `output`, or
the `error` message jinja2 raises, must be what jinja2 produces when set up the way transformers
sets it up (tools/make_chat_goldens.py: ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson / raise_exception / strftime_now). So the C++
test and this script together show Rill renders these constructs as jinja2 does.

    python3 tools/check_jinja_cases.py            # exit 1 and list every mismatch
    python3 tools/check_jinja_cases.py --update   # rewrite the expectations from jinja2

--backend transformers compiles the templates with transformers' own _compile_jinja_template
instead (on a machine with transformers installed).
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(REPO, "tests", "fixtures", "jinja_cases.json")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def compiler(backend):
    if backend == "transformers":
        from transformers.utils.chat_template_utils import _compile_jinja_template
        return _compile_jinja_template
    from make_chat_goldens import jinja2_environment
    env = jinja2_environment()
    return env.from_string


def render(compile_template, case):
    variables = {"messages": [], "tools": None, "documents": None,
                 "add_generation_prompt": False, **case.get("vars", {})}
    try:
        return {"output": compile_template(case["template"]).render(**variables)}
    except Exception as e:  # the expectation may be the error itself
        return {"error": str(e)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--backend", choices=["jinja2", "transformers"], default="jinja2")
    parser.add_argument("--update", action="store_true", help="rewrite expectations")
    args = parser.parse_args()
    with open(args.cases, encoding="utf-8") as f:
        data = json.load(f)
    compile_template = compiler(args.backend)
    mismatches = 0
    for case in data["cases"]:
        got = render(compile_template, case)
        expected = {k: case[k] for k in ("output", "error") if k in case}
        if args.update:
            case.pop("output", None)
            case.pop("error", None)
            case.update(got)
        elif got != expected:
            mismatches += 1
            print(f"MISMATCH {case['name']}: expected {expected!r}, jinja2 gives {got!r}")
    if args.update:
        with open(args.cases, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"{len(data['cases'])} cases, {mismatches} mismatches", file=sys.stderr)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
