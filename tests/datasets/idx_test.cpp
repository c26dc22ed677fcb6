// IDX parser and Fashion-MNIST loader: round trips of hand-built files, every refusal with its
// message, and the real Debian data set when it is installed.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <numeric>

#include "data/inflate.h"
#include "datasets/data_testing.h"
#include "nmsparse/data/fashion_mnist.h"
#include "nmsparse/data/idx.h"
#include "testing/expect_error.h"

namespace nms {
namespace {

using testing::Bytes;
using testing::expect_error;

Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, type, uint8_t(dims.size())};
  for (const uint32_t d : dims) testing::put_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes iota_bytes(size_t n, uint8_t start = 0) {
  Bytes out(n);
  std::iota(out.begin(), out.end(), start);
  return out;
}

// Writes the four files of a small data set (count images of rows x cols, labels i % 10).
struct SmallSet {
  int64_t count, rows, cols;
  Bytes pixels, labels;
  explicit SmallSet(int64_t n = 12, int64_t r = 3, int64_t c = 5, uint8_t first_pixel = 7)
      : count(n), rows(r), cols(c), pixels(iota_bytes(size_t(n * r * c), first_pixel)) {
    for (int64_t i = 0; i < count; ++i) labels.push_back(uint8_t(i % 10));
  }
  Bytes images_idx() const {
    return idx_bytes(8, {uint32_t(count), uint32_t(rows), uint32_t(cols)}, pixels);
  }
  Bytes labels_idx() const { return idx_bytes(8, {uint32_t(count)}, labels); }
  void write(const std::filesystem::path& dir, const std::string& prefix) const {
    testing::write_bytes(dir / (prefix + "-images-idx3-ubyte.gz"),
                         testing::gzip_bytes(images_idx()));
    testing::write_bytes(dir / (prefix + "-labels-idx1-ubyte.gz"),
                         testing::gzip_bytes(labels_idx()));
  }
};

TEST(ParseIdx, RoundTripsEveryRank) {
  const std::vector<std::vector<uint32_t>> shapes = {
      {7}, {3, 4}, {2, 3, 4}, {2, 1, 3, 2}, {0, 28, 28}};
  for (const auto& dims : shapes) {
    size_t numel = 1;
    for (const uint32_t d : dims) numel *= d;
    const Bytes data = iota_bytes(numel, 200);
    const IdxArray array = parse_idx(idx_bytes(8, dims, data), "mem");
    ASSERT_EQ(array.dims.size(), dims.size());
    for (size_t i = 0; i < dims.size(); ++i) EXPECT_EQ(array.dims[i], int64_t(dims[i]));
    EXPECT_EQ(array.data, data);
  }
}

TEST(ParseIdx, RefusesHeaderDefects) {
  expect_error([] { parse_idx({}, "f.idx"); }, "parse_idx: f.idx: truncated: 0 bytes");
  const Bytes three = {0, 0, 8};
  expect_error([&] { parse_idx(three, "f.idx"); }, "shorter than the 4-byte IDX magic");
  expect_error([] { parse_idx(idx_bytes(9, {2}, {1, 2}), "f.idx"); }, "bad magic 0x00000901");
  Bytes nonzero = idx_bytes(8, {2}, {1, 2});
  nonzero[0] = 0x1f;
  expect_error([&] { parse_idx(nonzero, "f.idx"); }, "bad magic 0x1f000801");
  expect_error([] { parse_idx(idx_bytes(8, {}, {}), "f.idx"); }, "0 dimensions (1..4 are read)");
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {1, 1, 1, 1, 1}, {1}), "f.idx");
      },
      "5 dimensions (1..4 are read)");
  Bytes short_header = idx_bytes(8, {2, 2, 2}, {});
  short_header.resize(12);
  expect_error([&] { parse_idx(short_header, "f.idx"); },
               "truncated: 12 bytes, shorter than the 16-byte header of 3 dimensions");
}

TEST(ParseIdx, RefusesSizeDefects) {
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {2, 3}, iota_bytes(5)), "f.idx");
      },
      "f.idx: truncated: dimensions 2 x 3 need 6 data bytes, only 5 present");
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {2, 3}, iota_bytes(8)), "f.idx");
      },
      "f.idx: 2 trailing bytes after the 6 data bytes of dimensions 2 x 3");
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {60000, 100000, 100000}, {}), "f.idx");
      },
      "absurd dimensions 60000 x 100000 x 100000");
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {0x80000000u, 0}, {}), "f.idx");
      },
      "absurd dimensions 2147483648 x 0");
  // Four maximal dimensions would overflow int64 if multiplied naively.
  expect_error(
      [] {
        parse_idx(idx_bytes(8, {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff}, {}), "f.idx");
      },
      "absurd dimensions");
}

TEST(FashionMnist, LoadsBothSplitsOfHandBuiltFiles) {
  testing::ScratchDir dir;
  const SmallSet train;
  SmallSet test(4, 2, 2, 100);
  test.labels = {9, 0, 3, 9};
  train.write(dir.path(), "train");
  test.write(dir.path(), "t10k");

  const ImageDataset a = load_fashion_mnist(dir.path(), DataSplit::kTrain);
  EXPECT_EQ(a.count, 12);
  EXPECT_EQ(a.rows, 3);
  EXPECT_EQ(a.cols, 5);
  EXPECT_EQ(a.pixels, train.pixels);
  EXPECT_EQ(a.labels, train.labels);
  const ImageDataset b = load_fashion_mnist(dir.path(), DataSplit::kTest);
  EXPECT_EQ(b.count, 4);
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.cols, 2);
  EXPECT_EQ(b.pixels, test.pixels);
  EXPECT_EQ(b.labels, test.labels);
}

TEST(FashionMnist, ReadsUncompressedFilesAndConcatenatedGzipMembers) {
  testing::ScratchDir dir;
  const SmallSet set;
  testing::write_bytes(dir.path() / "train-images-idx3-ubyte", set.images_idx());
  // `cat a.gz b.gz` of the two halves of the labels file.
  const Bytes labels = set.labels_idx();
  Bytes gz = testing::gzip_bytes(Bytes(labels.begin(), labels.begin() + 5));
  const Bytes tail = testing::gzip_bytes(Bytes(labels.begin() + 5, labels.end()));
  gz.insert(gz.end(), tail.begin(), tail.end());
  testing::write_bytes(dir.path() / "train-labels-idx1-ubyte.gz", gz);
  const ImageDataset a = load_fashion_mnist(dir.path(), DataSplit::kTrain);
  EXPECT_EQ(a.pixels, set.pixels);
  EXPECT_EQ(a.labels, set.labels);
}

TEST(FashionMnist, MissingFilesSayWhichPackage) {
  testing::ScratchDir dir;
  expect_error([&] { load_fashion_mnist(dir.path() / "nope", DataSplit::kTrain); },
               "nope/train-images-idx3-ubyte.gz: not found (apt-get install dataset-fashion-mnist");
  SmallSet().write(dir.path(), "train");
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTest); },
               "t10k-images-idx3-ubyte.gz: not found");
  std::filesystem::remove(dir.path() / "train-labels-idx1-ubyte.gz");
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); },
               "train-labels-idx1-ubyte.gz: not found (apt-get install dataset-fashion-mnist");
}

TEST(FashionMnist, DefaultDirFollowsTheEnvironment) {
  {
    testing::ScopedEnv env("NMSPARSE_FASHION_MNIST", "/data/fm");
    EXPECT_EQ(fashion_mnist_default_dir(), std::filesystem::path("/data/fm"));
  }
  testing::ScopedEnv env("NMSPARSE_FASHION_MNIST", nullptr);
  EXPECT_EQ(fashion_mnist_default_dir(),
            std::filesystem::path("/usr/share/datasets/fashion-mnist"));
}

// Writes `images` and `labels` (raw IDX bytes, gzipped here) as the training split and expects
// loading to fail with `fragment`.
void expect_load_error(const Bytes& images, const Bytes& labels, const std::string& fragment) {
  testing::ScratchDir dir;
  testing::write_bytes(dir.path() / "train-images-idx3-ubyte.gz", testing::gzip_bytes(images));
  testing::write_bytes(dir.path() / "train-labels-idx1-ubyte.gz", testing::gzip_bytes(labels));
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); }, fragment);
}

TEST(FashionMnist, RefusesInconsistentFiles) {
  const SmallSet set;
  Bytes bad_labels = set.labels;
  bad_labels[7] = 10;
  expect_load_error(set.images_idx(), idx_bytes(8, {12}, bad_labels),
                    "train-labels-idx1-ubyte.gz: label 10 at index 7 (labels are 0..9)");
  expect_load_error(set.images_idx(), idx_bytes(8, {11}, Bytes(11, 1)), "count mismatch: ");
  expect_load_error(set.images_idx(), idx_bytes(8, {11}, Bytes(11, 1)), "holds 12 images, ");
  expect_load_error(set.images_idx(), idx_bytes(8, {11}, Bytes(11, 1)),
                    "train-labels-idx1-ubyte.gz holds 11 labels");
  expect_load_error(idx_bytes(8, {12, 15}, set.pixels), set.labels_idx(),
                    "train-images-idx3-ubyte.gz: 2 dimensions, images need 3");
  expect_load_error(set.images_idx(), idx_bytes(8, {12, 1}, set.labels),
                    "train-labels-idx1-ubyte.gz: 2 dimensions, labels need 1");
  expect_load_error(idx_bytes(8, {0, 28, 28}, {}), idx_bytes(8, {0}, {}),
                    "train-images-idx3-ubyte.gz: empty: 0 images of 28 x 28");
  // parse_idx refusals name the file too.
  Bytes truncated = set.images_idx();
  truncated.pop_back();
  expect_load_error(truncated, set.labels_idx(),
                    "train-images-idx3-ubyte.gz: truncated: dimensions 12 x 3 x 5 need 180");
  Bytes trailing = set.labels_idx();
  trailing.push_back(0);
  expect_load_error(set.images_idx(), trailing,
                    "train-labels-idx1-ubyte.gz: 1 trailing bytes after the 12 data bytes");
  Bytes magic = set.images_idx();
  magic[2] = 0x0d;
  expect_load_error(magic, set.labels_idx(), "train-images-idx3-ubyte.gz: bad magic 0x00000d03");
  expect_load_error(idx_bytes(8, {60000, 100000, 100000}, {}), set.labels_idx(),
                    "train-images-idx3-ubyte.gz: absurd dimensions 60000 x 100000 x 100000");
}

TEST(FashionMnist, RefusesCorruptGzip) {
  const SmallSet set;
  testing::ScratchDir dir;
  const auto images = dir.path() / "train-images-idx3-ubyte.gz";
  testing::write_bytes(dir.path() / "train-labels-idx1-ubyte.gz",
                       testing::gzip_bytes(set.labels_idx()));
  const Bytes gz = testing::gzip_bytes(set.images_idx());

  testing::write_bytes(images, set.images_idx());  // not compressed at all
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); },
               "train-images-idx3-ubyte.gz: not gzip data");
  for (size_t keep = 2; keep < gz.size(); keep += 7) {
    testing::write_bytes(images, Bytes(gz.begin(), gz.begin() + ptrdiff_t(keep)));
    expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); },
                 "train-images-idx3-ubyte.gz: ");
  }
  testing::write_bytes(images, Bytes(gz.begin(), gz.end() - 9));
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); },
               "train-images-idx3-ubyte.gz: truncated gzip data");
  Bytes padded = gz;
  padded.insert(padded.end(), {0, 0, 0});
  testing::write_bytes(images, padded);
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); },
               "3 trailing bytes after the gzip data");
  Bytes flipped = gz;
  flipped[12] ^= 0xff;  // inside the deflate data
  testing::write_bytes(images, flipped);
  expect_error([&] { load_fashion_mnist(dir.path(), DataSplit::kTrain); }, "gzip data");
}

TEST(Inflate, StopsAtTheOutputBound) {
  // The loaders bound decompression at kIdxMaxBytes (+ header) and 1 GiB; the mechanism is the
  // same for any bound, so it is tested with a small one rather than with a 1 GiB gzip bomb.
  const Bytes src(100000, 0);
  const Bytes gz = testing::gzip_bytes(src);
  EXPECT_EQ(detail::inflate_bounded(gz, detail::ZFormat::kGzip, 100000, "ctx").bytes, src);
  expect_error([&] { detail::inflate_bounded(gz, detail::ZFormat::kGzip, 99999, "ctx"); },
               "ctx: gzip data decompresses to more than 99999 bytes");
  const Bytes z = testing::zlib_bytes(src);
  Bytes z_and_more = z;
  z_and_more.insert(z_and_more.end(), {1, 2, 3});
  const detail::Inflated inflated =
      detail::inflate_bounded(z_and_more, detail::ZFormat::kZlib, 100000, "ctx");
  EXPECT_EQ(inflated.bytes, src);
  EXPECT_EQ(inflated.consumed, z.size());
  expect_error([&] { detail::inflate_bounded(z, detail::ZFormat::kZlib, 0, "ctx"); },
               "ctx: zlib data decompresses to more than 0 bytes");
  expect_error(
      [&] {
        detail::inflate_bounded(Bytes(z.begin(), z.end() - 1), detail::ZFormat::kZlib, 100000,
                                "ctx");
      },
      "ctx: truncated zlib data");
}

TEST(FashionMnist, RealDebianDataSet) {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " is missing: apt-get install dataset-fashion-mnist";
  }
  for (const DataSplit split : {DataSplit::kTrain, DataSplit::kTest}) {
    const ImageDataset d = load_fashion_mnist(dir, split);
    const int64_t count = split == DataSplit::kTrain ? 60000 : 10000;
    EXPECT_EQ(d.count, count);
    EXPECT_EQ(d.rows, 28);
    EXPECT_EQ(d.cols, 28);
    EXPECT_EQ(d.pixels.size(), size_t(count * 28 * 28));
    ASSERT_EQ(d.labels.size(), size_t(count));
    std::array<int64_t, 10> histogram{};
    for (const uint8_t label : d.labels) ++histogram[label];
    for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], count / 10) << "class " << c;
    // Not all black: the images use the whole 0..255 range.
    uint8_t max_pixel = 0;
    for (const uint8_t p : d.pixels) max_pixel = std::max(max_pixel, p);
    EXPECT_EQ(max_pixel, 255);
  }
}

}  // namespace
}  // namespace nms
