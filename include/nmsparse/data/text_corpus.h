// Text corpora for character-level language models, and a byte-level vocabulary.
//
// The default corpus is Jane Austen's six novels (Emma, Mansfield Park, Northanger Abbey,
// Persuasion, Pride and Prejudice, Sense and Sensibility; public domain) from the R package
// janeaustenr (MIT), as shipped in Debian's r-cran-janeaustenr. Only its data file is used:
// scripts/fetch-austen.sh installs usr/lib/R/site-library/janeaustenr/data/Rdata.rdb from the .deb
// at austen_default_path() without installing the package (which would pull in R).
//
// Rdata.rdb, an R lazy-load database, is a concatenation of chunks
//   [4 bytes]  uncompressed length, big-endian uint32
//   [...]      a zlib stream that inflates to exactly that many bytes: the R serialisation of one
//              object in XDR (big-endian) form:
//     "X\n", int32 version (2 or 3), int32 writer R version, int32 minimal reader R version,
//     version 3 only: int32 n + n bytes of the native encoding name;
//     then the object: int32 flags (type = flags & 0xff), ...
// A character vector (STRSXP, type 16) continues with its length (int32, or -1 followed by two
// int32 halves of a 64-bit length) and that many CHARSXP (type 9) elements: int32 flags, int32
// length (-1 = NA_character_), then the bytes. Chunks of other types are skipped.
//
// The text: every element of every character vector, in file order, each followed by '\n' (an NA
// or empty element gives an empty line). Elements flagged Latin-1 are converted to UTF-8; the
// other ones (UTF-8, ASCII, native) are copied as they are. For the janeaustenr 1.0.0 file this
// is 4,025,029 bytes (73,422 lines, 82 distinct byte values) with sha256
// 65b434d16a8755142bfa95ba19c5f9abd0d30cf3dffe3b6793e834f9f56dcc96, the same as the extraction in
// research/data.md §2.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nms {

// $NMSPARSE_AUSTEN if set (and not empty), else
// ${XDG_CACHE_HOME:-$HOME/.cache}/nmsparse/janeaustenr/Rdata.rdb. Throws nms::Error when neither
// NMSPARSE_AUSTEN, XDG_CACHE_HOME nor HOME is set.
std::filesystem::path austen_default_path();

// The six novels as UTF-8 text (see above) from the Rdata.rdb at `rdb`. A missing file is an
// nms::Error that says to run scripts/fetch-austen.sh; a corrupt one, what is wrong with it.
std::string load_austen(const std::filesystem::path& rdb);

// The parser behind load_austen, on the bytes of an Rdata.rdb (`label` names it in messages).
// Every byte is hostile: lengths are checked against the bytes that remain, each chunk must
// inflate to exactly its declared length, the total output is bounded by 1 GiB, and a file with
// no character vector at all is refused. Throws nms::Error "parse_austen_rdata: <label>: chunk k
// at offset o: <defect>".
std::string parse_austen_rdata(std::span<const uint8_t> bytes, std::string_view label);

// The whole file as bytes: plain, or gunzipped when the name ends in ".gz" (at most 1 GiB of
// output; concatenated gzip members are read, anything else after them is refused).
std::string load_text_file(const std::filesystem::path& path);

// Byte-level vocabulary: the distinct bytes of a text, sorted. Ids are positions in `symbols`.
struct CharVocab {
  std::vector<uint8_t> symbols;      // sorted, distinct
  std::array<int16_t, 256> index{};  // index[b] = id of byte b, -1 for bytes not in the vocabulary

  static CharVocab from_text(std::string_view text);
  int64_t size() const;  // symbols.size()
  // One id per byte; nms::Error naming the byte value and its offset if one is not in symbols.
  std::vector<int64_t> encode(std::string_view text) const;
  // The bytes of the ids; nms::Error naming an id outside [0, size()) and its position.
  std::string decode(std::span<const int64_t> ids) const;
};

}  // namespace nms
