// The safetensors loader (engine/model/safetensors.cc): the input is a whole .safetensors file
// (8-byte little-endian header length, JSON header, data), parsed as SafetensorsFile::open
// parses a mapped file. Every tensor it accepts must lie within the input: all of its bytes are
// read back (ASan reports a read past the input). Any problem must be a rill::Error naming the
// file; anything else, or a sanitizer report (e.g. a shape whose element count overflows), is a
// bug.
//
// Seeds: tests/fuzz/corpus/safetensors; dictionary: safetensors.dict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "engine/error.h"
#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const rill::SafetensorsFile f =
        rill::SafetensorsFile::parse(bytes, nullptr, "fuzz.safetensors");
    volatile unsigned sum = 0;
    for (const auto& [name, t] : f.tensors()) {
      const auto* p = static_cast<const unsigned char*>(static_cast<const void*>(t.data));
      for (size_t i = 0; i < t.nbytes(); ++i) sum = sum + p[i];
    }
  } catch (const rill::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors: a %s escaped, not a rill::Error: %s\n", typeid(e).name(),
                 e.what());
    std::abort();
  }
  return 0;
}
