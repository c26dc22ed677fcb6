// The corrupt-file corpus (scripts/make_corrupt_safetensors.py): every file must be refused with
// an nms::Error naming the file and the defect, through both open() and from_bytes().
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "io/quote.h"
#include "io/strict_json.h"
#include "io_test_util.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/safetensors.h"

namespace nms {
namespace {

const std::filesystem::path kCorrupt =
    std::filesystem::path(NMS_TEST_DATA_DIR) / "safetensors" / "corrupt";

// File stem -> fragment the error message must contain.
const std::map<std::string, std::string>& expectations() {
  static const std::map<std::string, std::string> table = {
      {"truncated", "file is truncated: 3 bytes"},
      {"header_past_end", "header length 4096 runs past the end of the file"},
      {"huge_header_length", "exceeds the limit of 100000000 bytes"},
      {"empty_header", "header does not start with '{' (empty header)"},
      {"invalid_json", "header: invalid JSON at byte"},
      {"trailing_garbage_json", "header: invalid JSON at byte"},
      {"nul_padding", "header: invalid JSON: NUL byte at byte 54"},
      {"non_object_header", "header does not start with '{'"},
      {"invalid_utf8_name", "invalid JSON at byte"},
      {"deep_nesting", "nesting deeper than 8 levels"},
      {"unknown_dtype", "tensor 'a': unsupported dtype 'Q4_K'"},
      {"unsupported_dtype_f8", "unsupported dtype 'F8_E4M3'"},
      {"dtype_not_string", "tensor 'a': dtype is not a string"},
      {"entry_not_object", "tensor 'a': entry is not an object"},
      {"missing_dtype", "tensor 'a': missing \"dtype\""},
      {"extra_key", "tensor 'a': unexpected key 'x'"},
      {"empty_name", "empty tensor name"},
      {"duplicate_names", "duplicate key 'a'"},
      {"duplicate_inner_key", "duplicate key 'dtype'"},
      {"negative_shape", "shape dimension is negative (-2)"},
      {"float_shape", "shape dimension is not a non-negative integer ('2.0')"},
      {"shape_dim_too_large", "shape dimension 18446744073709551615 is too large"},
      {"shape_overflow", "shape [4294967296, 4294967296, 4294967296] overflows int64"},
      {"byte_size_overflow", "byte size of shape [2305843009213693952] x F64 overflows int64"},
      {"shape_bytes_mismatch", "shape/byte size mismatch"},
      {"offsets_wrong_length", "data_offsets is not an array [begin, end]"},
      {"offsets_begin_after_end", "data_offsets [8, 4] has begin > end"},
      {"offsets_huge_float", "data_offsets end is not a non-negative integer"},
      {"out_of_bounds_offsets", "data_offsets [0, 16] out of bounds: the data buffer has 8 bytes"},
      {"overlapping_offsets", "tensor 'b': data_offsets begin 4 overlaps tensor 'a' (ends at 8)"},
      {"gap_between_tensors", "tensor 'b': gap of 2 bytes between tensor 'a'"},
      {"gap_at_start", "gap of 4 bytes between the start of the data buffer"},
      {"trailing_bytes", "4 trailing bytes after the last tensor"},
      {"metadata_non_string", "__metadata__ value of key 'k' is not a string (number)"},
      {"metadata_not_object", "__metadata__ is not an object (array)"},
  };
  return table;
}

TEST(SafetensorsCorrupt, EveryFileInTheCorpusHasAnExpectation) {
  std::set<std::string> stems;
  for (const auto& entry : std::filesystem::directory_iterator(kCorrupt)) {
    stems.insert(entry.path().stem().string());
  }
  for (const auto& stem : stems) EXPECT_TRUE(expectations().count(stem)) << stem;
  for (const auto& [stem, fragment] : expectations()) EXPECT_TRUE(stems.count(stem)) << stem;
}

TEST(SafetensorsCorrupt, EveryFileIsRefusedWithAClearMessage) {
  for (const auto& [stem, fragment] : expectations()) {
    const auto path = kCorrupt / (stem + ".safetensors");
    try {
      (void)SafetensorsFile::open(path);
      ADD_FAILURE() << stem << ": accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(fragment), std::string::npos) << stem << ": " << what;
      EXPECT_NE(what.find(path.string()), std::string::npos) << stem << ": " << what;
      EXPECT_EQ(what.rfind("SafetensorsFile::open: ", 0), 0u) << what;
      EXPECT_LT(what.size(), 600u) << what;
    }
    const std::vector<uint8_t> bytes = testing_io::read_file(path);
    try {
      (void)SafetensorsFile::from_bytes(bytes, stem);
      ADD_FAILURE() << stem << ": accepted by from_bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << stem << ": " << e.what();
    }
  }
}

TEST(SafetensorsCorrupt, EveryTruncationOfAValidFileIsRefused) {
  const std::vector<uint8_t> bytes =
      testing_io::read_file(std::filesystem::path(NMS_TEST_DATA_DIR) / "safetensors" / "golden" /
                            "all_dtypes.safetensors");
  ASSERT_FALSE(bytes.empty());
  EXPECT_NO_THROW((void)SafetensorsFile::from_bytes(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW((void)SafetensorsFile::from_bytes(std::span(bytes).first(n)), Error) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_THROW((void)SafetensorsFile::from_bytes(longer), Error);
}

TEST(SafetensorsCorrupt, SingleByteFlipsNeverCrash) {
  // Every byte of the header region flipped in turn: must either parse or throw nms::Error.
  const std::vector<uint8_t> bytes =
      testing_io::read_file(std::filesystem::path(NMS_TEST_DATA_DIR) / "safetensors" / "golden" /
                            "all_dtypes.safetensors");
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const uint8_t mask : {0x01, 0x20, 0x80, 0xff}) {
      std::vector<uint8_t> copy = bytes;
      copy[i] ^= mask;
      try {
        const SafetensorsFile file = SafetensorsFile::from_bytes(copy);
        for (const TensorInfo& info : file.tensors()) {
          (void)file.raw(info);
          if (dtype_is_float(info.dtype)) (void)file.read_f32(info);
        }
      } catch (const Error&) {
      }
    }
  }
}

TEST(SafetensorsCorrupt, TrailingSpacePaddingIsAccepted) {
  // Header padded with spaces beyond what the writer would add is valid per the format.
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})" + std::string(13, ' ');
  std::vector<uint8_t> bytes(8);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.push_back(7);
  bytes.push_back(9);
  const SafetensorsFile file = SafetensorsFile::from_bytes(bytes);
  EXPECT_EQ(testing_io::from_bytes<uint8_t>(file.raw(file.at("a"))), (std::vector<uint8_t>{7, 9}));
}

TEST(SafetensorsCorrupt, OpenReportsMissingFilesAndDirectories) {
  testing_io::ScratchDir dir;
  try {
    (void)SafetensorsFile::open(dir / "absent.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors: cannot open: No such file"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)SafetensorsFile::open(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  try {
    (void)SafetensorsFile::open(dir / "fifo");  // must not block waiting for a writer
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  testing_io::write_text(dir / "zero.safetensors", "");
  EXPECT_THROW((void)SafetensorsFile::open(dir / "zero.safetensors"), Error);
}

TEST(QuoteUntrusted, EscapesAndTruncates) {
  EXPECT_EQ(detail::quote_untrusted("abc"), "'abc'");
  EXPECT_EQ(detail::quote_untrusted(std::string_view("a\0\xff'\\", 5)), "'a\\x00\\xff\\'\\\\'");
  const std::string long_name(1000, 'x');
  const std::string quoted = detail::quote_untrusted(long_name, 10);
  EXPECT_EQ(quoted, "'xxxxxxxxxx'...");
}

TEST(StrictJson, RejectsDuplicatesAtAnyDepthAndEnforcesLimits) {
  EXPECT_NO_THROW(detail::parse_strict_json(R"({"a": {"b": 1, "c": [1, 2]}} )", "ctx"));
  EXPECT_THROW(detail::parse_strict_json(R"({"a": 1, "a": 1})", "ctx"), Error);
  EXPECT_THROW(detail::parse_strict_json(R"({"a": {"b": 1, "b": 2}})", "ctx"), Error);
  EXPECT_THROW(detail::parse_strict_json(R"([{"b": 1, "b": 2}])", "ctx"), Error);
  EXPECT_NO_THROW(detail::parse_strict_json(R"([{"b": 1}, {"b": 2}])", "ctx"));
  EXPECT_THROW(detail::parse_strict_json("[[[1]]]", "ctx", {.max_depth = 2}), Error);
  EXPECT_THROW(detail::parse_strict_json("[1, 2, 3]", "ctx", {.max_array_size = 2}), Error);
  EXPECT_THROW(detail::parse_strict_json("{} {}", "ctx"), Error);
  EXPECT_THROW(detail::parse_strict_json("", "ctx"), Error);
  EXPECT_THROW(detail::parse_strict_json(std::string_view("{}\0{", 4), "ctx"), Error);
  EXPECT_THROW(detail::parse_strict_json(std::string_view("{\"a\0\": 1}", 9), "ctx"), Error);
  try {
    detail::parse_strict_json(R"({"k": 1, "k": 2})", "my context");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "my context: duplicate key 'k'");
  }
}

}  // namespace
}  // namespace nms
