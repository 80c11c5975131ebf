"""Every repository path named in a comment, a docstring or a doc exists.

Comments that point at files ("the CPU sampler (engine/runner/sampling.cc)") rot when files
move: seven once named files that no longer existed. This test reads the comments of the C++,
CUDA, proto, JS, Python, shell and CMake files and every line of the Markdown docs, takes each
token that starts with a top-level folder of the repository (engine/, kernels/, server/, ...),
expands shell braces (engine/runner/sampling.{h,cc}) and checks that the path exists. Build
outputs (a path ending in a CMake target's name, as in `tests/clients/rill_loadtest_unit_tests`)
and placeholders (`$dir`, `*`, `<run>`, `{name}`) are not repository paths."""
import os
import re
import subprocess
import sys
import unittest

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
TOP = ("engine", "kernels", "server", "tools", "tests", "docs", "proto", "clients", "bench", "scripts",
       "configs", "models", "docker")
# A path token: a top folder, then path characters; not the tail of a longer path or a URL.
PATH = re.compile(r"(?<![\w/.\-])((?:" + "|".join(TOP) + r")/[\w.{},/\-]*[\w}/])")
SELF = "tests/repo/source_paths_test.py"
PLACEHOLDER = re.compile(r"[$*<%]")
SLASH_COMMENTS = (".h", ".cc", ".cu", ".cuh", ".proto", ".mjs", ".js")
HASH_COMMENTS = (".py", ".sh", ".cmake", ".yml", ".yaml", "CMakeLists.txt", "Dockerfile")


def tracked_files():
    """The repository's files: git's list, or a walk of the tree outside a checkout."""
    try:
        out = subprocess.check_output(["git", "-C", SOURCE_DIR, "ls-files", "-z"], stderr=subprocess.DEVNULL)
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(SOURCE_DIR):
            dirs[:] = [d for d in dirs if not d.startswith(("build", ".")) and d != "node_modules"]
            files += [os.path.relpath(os.path.join(root, n), SOURCE_DIR) for n in names]
        return files


def build_targets():
    """Names of the executables and libraries CMake builds (their paths are in the build tree)."""
    names = set()
    for rel in tracked_files():
        if rel.endswith("CMakeLists.txt"):
            with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
                names |= set(re.findall(r"add_(?:executable|library)\(\s*([\w\-]+)", f.read()))
    return names


def commented_text(rel, lines):
    """(line number, text) of what is prose in `rel`: comments, docstrings, or all of a doc."""
    in_doc = False
    for number, line in enumerate(lines, 1):
        if rel.endswith(".md"):
            yield number, line
        elif rel.endswith(SLASH_COMMENTS):
            if "//" in line:
                yield number, line[line.index("//"):]
        elif rel.endswith(HASH_COMMENTS):
            quotes = line.count('"""') + line.count("'''")
            if in_doc or quotes:
                yield number, line
            elif "#" in line:
                yield number, line[line.index("#"):]
            if rel.endswith(".py") and quotes % 2 == 1:
                in_doc = not in_doc


def expand(token):
    """Shell brace expansion: a/{b,c}.h -> a/b.h, a/c.h."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out += expand(token[:m.start()] + alt + token[m.end():])
    return out


def missing_paths():
    targets = build_targets()
    missing = []
    for rel in tracked_files():
        if not rel.endswith(SLASH_COMMENTS + HASH_COMMENTS + (".md",)) or rel == SELF:
            continue  # this file's examples name missing paths on purpose
        try:
            with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for number, text in commented_text(rel, lines):
            for m in PATH.finditer(text):
                token = m.group(1).rstrip(".,")
                if PLACEHOLDER.search(text[m.end():m.end() + 1]) or re.search(r"\{[^,}]*\}", token):
                    continue  # a placeholder: "docs/loadtest/<run>.html", f"tests/fixtures/{name}"
                for path in expand(token):
                    if os.path.basename(path.rstrip("/")) in targets:
                        continue
                    if not os.path.exists(os.path.join(SOURCE_DIR, path.rstrip("/"))):
                        missing.append(f"{rel}:{number}: {path}")
    return missing


class SourcePathsTest(unittest.TestCase):
    def test_every_named_path_exists(self):
        missing = missing_paths()
        self.assertEqual(missing, [], "paths named but not in the repository:\n" + "\n".join(missing))

    def test_the_extending_guide_points_at_code(self):
        """docs/extending.md: every section names files (which the test above checks exist), so
        the guide cannot drift into prose that no check holds to the tree."""
        with open(os.path.join(SOURCE_DIR, "docs/extending.md"), encoding="utf-8") as f:
            sections = re.split(r"^## ", f.read(), flags=re.M)[1:]
        self.assertGreaterEqual(len(sections), 5)
        for section in sections:
            title = section.splitlines()[0]
            paths = [p for m in PATH.finditer(section) for p in expand(m.group(1).rstrip(".,"))
                     if not PLACEHOLDER.search(p)]
            self.assertGreaterEqual(len(paths), 2, f"docs/extending.md '{title}' names no files")
            for p in paths:
                self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, p.rstrip("/"))),
                                f"docs/extending.md '{title}': {p}")

    def test_the_check_sees_paths(self):
        self.assertEqual(expand("engine/runner/sampling.{h,cc}"),
                         ["engine/runner/sampling.h", "engine/runner/sampling.cc"])
        self.assertEqual([m.group(1) for m in PATH.finditer("(engine/sampling.cc) https://x.org/engine/a.h")],
                         ["engine/sampling.cc"])
        lines = ['x = "engine/a.h"  # see engine/b.h\n', '"""Doc: engine/c.h\n', 'engine/d.h\n', '"""\n']
        self.assertEqual([t for _, t in commented_text("t.py", lines)],
                         ["# see engine/b.h\n", '"""Doc: engine/c.h\n', "engine/d.h\n", '"""\n'])
        self.assertIn("rill-server", build_targets())


if __name__ == "__main__":
    sys.exit(unittest.main())
