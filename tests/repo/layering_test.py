"""Includes follow the layers (issue 31):

- front ends (server/, but main.cc, which composes the program) take what they need of the
  engine from its request API (engine/serving/): never the runner interface
  (engine/runner/runner.h), the KV-cache manager or a concrete runner;
- engine/runner/ (the runner interface and what every runner shares) never includes a concrete
  runner (engine/cpu/, engine/cuda/): engine/runner_factory.cc composes them, above both. The
  one exception is engine/cuda/cuda_tuning.h, plain options that EngineOptions carries;
- engine/scheduler/ plans against engine/scheduler/plan_host.h, never the runner's concrete
  classes. engine/serving/ never includes a runner either: the worker pool its loop computes
  grammar masks on is engine/util/thread_pool.h;
- engine/util/ is layer-neutral: it includes nothing of the project outside engine/util/, so
  every layer may use it.
"""
import os
import re
import subprocess
import unittest

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def tracked(prefix):
    out = subprocess.check_output(["git", "-C", SOURCE_DIR, "ls-files", "-z", prefix])
    return [p for p in out.decode().split("\0") if p.endswith((".h", ".cc", ".cu", ".cuh"))]


# engine/util/'s own headers: the one part of the project that engine/util/ may include.
UTIL_INCLUDES = {p for p in tracked("engine/util/") if p.endswith(".h")}

RULES = [
    # (files under, files exempt, forbidden include prefixes, includes allowed anyway)
    ("server/", {"server/main.cc"},
     ("engine/runner/runner.h", "engine/kv/kv_cache_manager.h", "engine/cpu/", "engine/cuda/"), set()),
    ("engine/runner/", set(), ("engine/cpu/", "engine/cuda/"), {"engine/cuda/cuda_tuning.h"}),
    ("engine/scheduler/", set(), ("engine/cpu/", "engine/cuda/", "engine/runner_factory.h"), set()),
    ("engine/serving/", set(), ("engine/cpu/", "engine/cuda/", "engine/runner_factory.h"), set()),
    ("engine/util/", set(), ("engine/", "kernels/", "server/", "proto/", "clients/"),
     UTIL_INCLUDES),
]


class Layering(unittest.TestCase):
    def test_includes_follow_the_layers(self):
        bad = []
        for under, exempt, forbidden, allowed in RULES:
            for rel in tracked(under):
                if rel in exempt:
                    continue
                with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
                    for inc in INCLUDE.findall(f.read()):
                        if inc.startswith(forbidden) and inc not in allowed:
                            bad.append(f"{rel} includes {inc}")
        self.assertEqual(bad, [], "\n".join(bad))

    def test_the_rules_see_files(self):
        for under, *_ in RULES:
            self.assertTrue(tracked(under), under)


if __name__ == "__main__":
    unittest.main()
