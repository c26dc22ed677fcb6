// The Austen R-data parser on synthetic lazy-load databases (every truncation, corruption and
// refusal), the real file when fetched, load_text_file, and CharVocab.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "datasets/data_testing.h"
#include "nmsparse/data/text_corpus.h"
#include "testing/expect_error.h"

namespace nms {
namespace {

using testing::Bytes;
using testing::expect_error;

constexpr uint32_t kCharSxpUtf8 = 9 | (8 << 12);    // CHARSXP, UTF8_MASK in the levels
constexpr uint32_t kCharSxpLatin1 = 9 | (4 << 12);  // CHARSXP, LATIN1_MASK
constexpr uint32_t kCharSxpAscii = 9 | (64 << 12);  // CHARSXP, ASCII_MASK

struct Element {
  std::optional<std::string> text;  // nullopt: NA_character_
  uint32_t flags = kCharSxpAscii;
};

// The R serialisation header ("X\n", version, R versions, v3: native encoding).
Bytes serialisation_header(int version) {
  Bytes out;
  testing::put_text(out, "X\n");
  testing::put_be32(out, uint32_t(version));
  testing::put_be32(out, 0x00040201);  // written by R 4.2.1
  testing::put_be32(out, 0x00030500);  // readable by R >= 3.5.0
  if (version == 3) {
    testing::put_be32(out, 5);
    testing::put_text(out, "UTF-8");
  }
  return out;
}

Bytes strsxp(const std::vector<Element>& elements, int version = 3) {
  Bytes out = serialisation_header(version);
  testing::put_be32(out, 16);  // STRSXP, no attributes
  testing::put_be32(out, uint32_t(elements.size()));
  for (const Element& e : elements) {
    testing::put_be32(out, e.flags);
    if (!e.text) {
      testing::put_be32(out, 0xffffffff);
    } else {
      testing::put_be32(out, uint32_t(e.text->size()));
      testing::put_text(out, *e.text);
    }
  }
  return out;
}

// An integer vector (INTSXP, 13), which the parser must skip.
Bytes intsxp(const std::vector<int32_t>& values) {
  Bytes out = serialisation_header(2);
  testing::put_be32(out, 13);
  testing::put_be32(out, uint32_t(values.size()));
  for (const int32_t v : values) testing::put_be32(out, uint32_t(v));
  return out;
}

// One chunk of a lazy-load database: big-endian length, zlib stream. `declared` overrides the
// length.
Bytes chunk(const Bytes& serialised, std::optional<uint32_t> declared = std::nullopt) {
  Bytes out;
  testing::put_be32(out, declared.value_or(uint32_t(serialised.size())));
  const Bytes z = testing::zlib_bytes(serialised);
  out.insert(out.end(), z.begin(), z.end());
  return out;
}

Bytes cat(const std::vector<Bytes>& parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Two chunks: a skipped integer vector, then the character vector with an NA. The character
// vector comes last so that every proper prefix of the file is refused (a prefix ending at a
// chunk boundary would otherwise be a valid, shorter database).
Bytes two_chunk_rdb() {
  return cat({chunk(intsxp({1, 2, 3})), chunk(strsxp({{"It is a truth universally acknowledged,"},
                                                      {std::nullopt},
                                                      {"", kCharSxpUtf8},
                                                      {"\xc2\xa3"
                                                       "5",
                                                       kCharSxpUtf8}}))});
}
const std::string kTwoChunkText =
    "It is a truth universally acknowledged,\n\n\n\xc2\xa3"
    "5\n";

TEST(AustenRdata, ReadsCharacterVectorsAndSkipsOtherObjects) {
  EXPECT_EQ(parse_austen_rdata(two_chunk_rdb(), "mem"), kTwoChunkText);
  // Several vectors, versions 2 and 3, Latin-1 converted to UTF-8.
  const Bytes rdb = cat({chunk(strsxp({{"Emma"}, {"Woodhouse"}}, 2)), chunk(intsxp({})),
                         chunk(strsxp({{"caf\xe9", kCharSxpLatin1}, {"\xa3", kCharSxpLatin1}})),
                         chunk(strsxp({}))});
  EXPECT_EQ(parse_austen_rdata(rdb, "mem"), "Emma\nWoodhouse\ncaf\xc3\xa9\n\xc2\xa3\n");
}

TEST(AustenRdata, EveryTruncationIsRefused) {
  const Bytes rdb = two_chunk_rdb();
  for (size_t keep = 0; keep < rdb.size(); ++keep) {
    const Bytes prefix(rdb.begin(), rdb.begin() + ptrdiff_t(keep));
    expect_error([&] { parse_austen_rdata(prefix, "cut.rdb"); }, "parse_austen_rdata: cut.rdb: ");
  }
}

TEST(AustenRdata, EveryByteFlipIsRefusedOrParsed) {
  // Corruption anywhere: an nms::Error or some text, never a crash (the sanitizer builds check
  // the memory accesses).
  const Bytes rdb = two_chunk_rdb();
  int refused = 0;
  for (size_t i = 0; i < rdb.size(); ++i) {
    for (const uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      Bytes bad = rdb;
      bad[i] ^= mask;
      try {
        parse_austen_rdata(bad, "flip.rdb");
      } catch (const Error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(AustenRdata, RefusesMalformedChunks) {
  expect_error([] { parse_austen_rdata({}, "e.rdb"); },
               "parse_austen_rdata: e.rdb: no character vector in its 0 chunks (0 bytes)");
  expect_error([] { parse_austen_rdata(chunk(intsxp({7})), "e.rdb"); },
               "no character vector in its 1 chunks");
  Bytes garbage = two_chunk_rdb();
  garbage.insert(garbage.end(), {0, 0, 1});
  expect_error([&] { parse_austen_rdata(garbage, "e.rdb"); },
               "e.rdb: chunk 2 at offset " + std::to_string(garbage.size() - 3) +
                   ": truncated chunk header (3 bytes, the length takes 4)");
  garbage.insert(garbage.end(), {0, 9, 9, 9, 9});
  expect_error([&] { parse_austen_rdata(garbage, "e.rdb"); }, "chunk 2 at offset");
  expect_error([&] { parse_austen_rdata(garbage, "e.rdb"); }, "corrupt zlib data");

  const Bytes vec = strsxp({{"abc"}});
  expect_error([&] { parse_austen_rdata(chunk(vec, uint32_t(vec.size() + 1)), "e.rdb"); },
               "chunk 0 at offset 0: inflates to " + std::to_string(vec.size()) +
                   " bytes, the chunk declares " + std::to_string(vec.size() + 1));
  expect_error([&] { parse_austen_rdata(chunk(vec, uint32_t(vec.size() - 1)), "e.rdb"); },
               "zlib data decompresses to more than " + std::to_string(vec.size() - 1));
  expect_error([&] { parse_austen_rdata(chunk(vec, 0xffffffff), "e.rdb"); },
               "declares 4294967295 bytes, more than 1073741824 in all");

  Bytes ascii = vec;
  ascii[0] = 'A';
  expect_error([&] { parse_austen_rdata(chunk(ascii), "e.rdb"); },
               "R serialisation format bytes 0x41 0xa, only XDR");
  Bytes v4 = vec;
  v4[5] = 4;
  expect_error([&] { parse_austen_rdata(chunk(v4), "e.rdb"); }, "R serialisation version 4");
  Bytes encoding = vec;
  encoding[14] = 0x80;  // native encoding length < 0
  expect_error([&] { parse_austen_rdata(chunk(encoding), "e.rdb"); },
               "negative native encoding length");
  encoding[14] = 0x7f;  // far beyond the end
  expect_error([&] { parse_austen_rdata(chunk(encoding), "e.rdb"); },
               "truncated R serialisation: the native encoding name needs 2130706437 bytes");

  // Header: 2 + 12 + 4 + 5 = 23 bytes, then flags (23..26), length (27..30), element flags,
  // element length (35..38).
  Bytes count = vec;
  count[27] = 0x10;
  expect_error([&] { parse_austen_rdata(chunk(count), "e.rdb"); },
               "character vector of 268435457 elements cannot fit");
  Bytes long_count = vec;
  long_count[27] = long_count[28] = long_count[29] = long_count[30] = 0xff;  // -1: long vector
  expect_error([&] { parse_austen_rdata(chunk(long_count), "e.rdb"); }, "elements cannot fit");
  Bytes type = vec;
  type[34] = 13;
  expect_error([&] { parse_austen_rdata(chunk(type), "e.rdb"); },
               "element 0 of the character vector has type 13, not CHARSXP (9)");
  Bytes length = vec;
  length[35] = 0xff;  // -16777213
  expect_error([&] { parse_austen_rdata(chunk(length), "e.rdb"); }, "element 0 has length -");
  length[35] = 0;
  length[38] = 4;  // one byte more than there is
  expect_error([&] { parse_austen_rdata(chunk(length), "e.rdb"); },
               "truncated R serialisation: an element's bytes needs 4 bytes at byte 39, only 3 "
               "remain");
}

TEST(AustenRdata, MissingFileSaysHowToFetchIt) {
  testing::ScratchDir dir;
  expect_error([&] { load_austen(dir.path() / "Rdata.rdb"); },
               "Rdata.rdb: not found (run scripts/fetch-austen.sh");
  testing::write_bytes(dir.path() / "Rdata.rdb", two_chunk_rdb());
  EXPECT_EQ(load_austen(dir.path() / "Rdata.rdb"), kTwoChunkText);
}

TEST(AustenRdata, DefaultPathFollowsTheEnvironment) {
  {
    testing::ScopedEnv austen("NMSPARSE_AUSTEN", "/data/a.rdb");
    EXPECT_EQ(austen_default_path(), std::filesystem::path("/data/a.rdb"));
  }
  testing::ScopedEnv austen("NMSPARSE_AUSTEN", nullptr);
  {
    testing::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(austen_default_path(), std::filesystem::path("/xdg/nmsparse/janeaustenr/Rdata.rdb"));
  }
  testing::ScopedEnv xdg("XDG_CACHE_HOME", "");
  {
    testing::ScopedEnv home("HOME", "/home/u");
    EXPECT_EQ(austen_default_path(),
              std::filesystem::path("/home/u/.cache/nmsparse/janeaustenr/Rdata.rdb"));
  }
  testing::ScopedEnv home("HOME", nullptr);
  expect_error([] { austen_default_path(); },
               "neither NMSPARSE_AUSTEN, XDG_CACHE_HOME nor HOME is set");
}

TEST(AustenRdata, RealJaneAustenrFile) {
  const std::filesystem::path path = austen_default_path();
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is missing: run scripts/fetch-austen.sh";
  }
  const std::string text = load_austen(path);
  EXPECT_EQ(text.size(), 4025029u);
  EXPECT_EQ(CharVocab::from_text(text).size(), 82);
  size_t lines = 0;
  for (const char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 73422u);
  // FNV-1a 64 of the text, computed once when the text's sha256 was checked against
  // 65b434d16a8755142bfa95ba19c5f9abd0d30cf3dffe3b6793e834f9f56dcc96 (research/data.md §2).
  uint64_t hash = 1469598103934665603ull;
  for (const char c : text) hash = (hash ^ uint8_t(c)) * 1099511628211ull;
  EXPECT_EQ(hash, 0x8a502a3167bbfbe2ull);
  EXPECT_NE(text.find("It is a truth universally acknowledged"), std::string::npos);
}

TEST(TextFile, ReadsPlainAndGzip) {
  testing::ScratchDir dir;
  const std::string text = "line one\nline two\n\xc2\xa3\n";
  const Bytes bytes(text.begin(), text.end());
  testing::write_bytes(dir.path() / "a.txt", bytes);
  testing::write_bytes(dir.path() / "a.txt.gz", testing::gzip_bytes(bytes));
  testing::write_bytes(dir.path() / "empty.txt", {});
  EXPECT_EQ(load_text_file(dir.path() / "a.txt"), text);
  EXPECT_EQ(load_text_file(dir.path() / "a.txt.gz"), text);
  EXPECT_EQ(load_text_file(dir.path() / "empty.txt"), "");
  expect_error([&] { load_text_file(dir.path() / "b.txt"); }, "load_text_file: ");
  expect_error([&] { load_text_file(dir.path() / "b.txt"); }, "b.txt: not found");
  testing::write_bytes(dir.path() / "plain.gz", bytes);
  expect_error([&] { load_text_file(dir.path() / "plain.gz"); }, "plain.gz: not gzip data");
  expect_error([&] { load_text_file(dir.path()); }, "load_text_file: ");
}

TEST(CharVocab, RoundTrip) {
  const std::string text = "hello, world\n";
  const CharVocab vocab = CharVocab::from_text(text);
  EXPECT_EQ(vocab.size(), 10);
  EXPECT_EQ(std::string(vocab.symbols.begin(), vocab.symbols.end()), "\n ,dehlorw");
  const std::vector<int64_t> ids = vocab.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], vocab.index['h']);
  EXPECT_EQ(vocab.decode(ids), text);
  for (int b = 0; b < 256; ++b) {
    const bool in = text.find(char(b)) != std::string::npos;
    EXPECT_EQ(vocab.index[b] >= 0, in) << b;
    if (in) {
      EXPECT_EQ(vocab.symbols[size_t(vocab.index[b])], b);
    }
  }
  // All 256 byte values, and the empty text.
  std::string all;
  for (int b = 255; b >= 0; --b) all.push_back(char(b));
  const CharVocab full = CharVocab::from_text(all);
  EXPECT_EQ(full.size(), 256);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(full.index[b], b);
  EXPECT_EQ(full.decode(full.encode(all)), all);
  const CharVocab empty = CharVocab::from_text("");
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.encode("").empty());
  EXPECT_EQ(empty.decode({}), "");
}

TEST(CharVocab, Errors) {
  const CharVocab vocab = CharVocab::from_text("abc");
  expect_error([&] { vocab.encode("abz"); },
               "CharVocab::encode: byte 122 (0x7a) at offset 2 is not in the vocabulary of 3 "
               "symbols");
  expect_error([&] { vocab.encode(std::string("a\xff", 2)); }, "byte 255 (0xff) at offset 1");
  const std::vector<int64_t> high = {0, 1, 3};
  expect_error([&] { vocab.decode(high); },
               "CharVocab::decode: id 3 at position 2 is outside the vocabulary [0, 3)");
  const std::vector<int64_t> negative = {-1};
  expect_error([&] { vocab.decode(negative); }, "id -1 at position 0");
  // A default-constructed vocabulary holds nothing.
  const CharVocab none;
  expect_error([&] { none.encode("a"); }, "byte 97 (0x61) at offset 0");
}

}  // namespace
}  // namespace nms
