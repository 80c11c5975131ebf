"""rill-server with fp8 weights: --quantization fp8 on the default model and an fp8 checkpoint both
serve completions, /v1/models reports the quantization (gRPC GetModelInfo carries the same string,
grpc_api_test.py checks its "none"), and a bad --quantization is refused at start naming the field."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SERVER, SOURCE_DIR, Server  # noqa: E402


class QuantizationTest(unittest.TestCase):
    def serve(self, *args):
        server = Server(*args)
        try:
            status, raw = server.get("/v1/models")
            self.assertEqual(status, 200, raw)
            quantization = json.loads(raw)["data"][0]["quantization"]
            status, raw = server.post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 8,
                                                          "temperature": 0, "ignore_eos": True})
            self.assertEqual(status, 200, raw)
            self.assertEqual(json.loads(raw)["usage"]["completion_tokens"], 8)
            return quantization
        finally:
            server.stop()

    def test_quantized_at_load(self):
        self.assertEqual(self.serve("--quantization", "fp8"),
                         "fp8 (per-channel weight scales computed at load, dynamic per-token activations)")
        self.assertEqual(self.serve("--quantization", "none"), "none")

    def test_fp8_checkpoint(self):
        model = os.path.join(SOURCE_DIR, "tests/fixtures/fp8_block")
        self.assertEqual(self.serve("--model", model),
                         "fp8 (quant_method fp8, 128x128 block weight scales, dynamic per-token-group activations)")
        self.assertEqual(self.serve("--model", model, "--quantization", "none"), "none")

    def test_bad_value_names_the_field(self):
        r = subprocess.run([SERVER, "--quantization", "int4"], cwd=SOURCE_DIR, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("engine.quantization", r.stderr)
        self.assertIn("auto, fp8 or none", r.stderr)


if __name__ == "__main__":
    unittest.main()
