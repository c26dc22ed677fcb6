// libFuzzer target for the dataset readers: any byte string must either be refused with
// nms::Error or parse into a consistent result. Anything else (a crash, a sanitizer report,
// another exception type, a hang, an allocation beyond the bounds) is a bug.
//
// The first byte picks what the rest feeds:
//   0  parse_idx on the bytes
//   1  parse_austen_rdata on the bytes (a whole lazy-load database)
//   2  parse_austen_rdata on one chunk built here around the bytes: [length][zlib(bytes)], so
//      mutations reach the R serialisation parser instead of dying in zlib's checks; the second
//      byte, when odd, makes the declared length one too large
//   3  the gzip inflation of the Fashion-MNIST loader (bounded at 1 MiB here), then parse_idx
// Build and run: scripts/fuzz.sh SECONDS (clang, -fsanitize=fuzzer,address,undefined).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/inflate.h"
#include "nmsparse/core/error.h"
#include "nmsparse/data/idx.h"
#include "nmsparse/data/text_corpus.h"

namespace {

void check_idx(std::span<const uint8_t> bytes) {
  const nms::IdxArray array = nms::parse_idx(bytes, "fuzz-input");
  int64_t numel = 1;
  for (const int64_t d : array.dims) numel *= d;
  if (array.dims.empty() || array.dims.size() > 4) __builtin_trap();
  if (numel < 0 || numel > nms::kIdxMaxBytes || array.data.size() != size_t(numel)) {
    __builtin_trap();
  }
}

void check_text(const std::string& text) {
  // Every element ends a line (a file of empty character vectors gives no text).
  if (!text.empty() && text.back() != '\n') __builtin_trap();
  const nms::CharVocab vocab = nms::CharVocab::from_text(text);
  if (vocab.decode(vocab.encode(text)) != text) __builtin_trap();
}

std::vector<uint8_t> one_chunk(std::span<const uint8_t> serialised, bool declare_more) {
  uLongf z_size = compressBound(uLong(serialised.size()));
  std::vector<uint8_t> out(4 + z_size);
  if (compress2(out.data() + 4, &z_size, serialised.data(), uLong(serialised.size()), 1) != Z_OK) {
    __builtin_trap();
  }
  out.resize(4 + z_size);
  const uint32_t length = uint32_t(serialised.size()) + (declare_more ? 1 : 0);
  for (int i = 0; i < 4; ++i) out[size_t(i)] = uint8_t(length >> (24 - 8 * i));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:
        check_idx(rest);
        break;
      case 1:
        check_text(nms::parse_austen_rdata(rest, "fuzz-input"));
        break;
      case 2: {
        const bool declare_more = !rest.empty() && (rest[0] & 1) != 0;
        const std::span<const uint8_t> body = rest.empty() ? rest : rest.subspan(1);
        check_text(nms::parse_austen_rdata(one_chunk(body, declare_more), "fuzz-input"));
        break;
      }
      default: {
        const std::vector<uint8_t> raw =
            nms::detail::inflate_bounded(rest, nms::detail::ZFormat::kGzip, 1 << 20, "fuzz-input")
                .bytes;
        if (raw.size() > (1 << 20)) __builtin_trap();
        check_idx(raw);
        break;
      }
    }
  } catch (const nms::Error&) {
    // Refused: the expected outcome for almost every input.
  }
  return 0;
}
