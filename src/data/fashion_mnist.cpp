// Fashion-MNIST loader: gzipped (or plain) IDX files, checked against each other.
#include "nmsparse/data/fashion_mnist.h"

#include <array>
#include <cstdlib>
#include <string>
#include <utility>

#include "data/inflate.h"
#include "nmsparse/core/error.h"
#include "nmsparse/data/idx.h"

namespace nms {
namespace {

// The IDX array of `dir`/`name`.gz, or of the uncompressed `dir`/`name` when only that exists.
IdxArray load_idx_file(const std::filesystem::path& dir, const std::string& name) {
  const std::filesystem::path gz = dir / (name + ".gz");
  const std::filesystem::path raw = dir / name;
  std::error_code ec;
  if (!std::filesystem::exists(gz, ec) && std::filesystem::exists(raw, ec)) {
    const std::string context = detail::concat("load_fashion_mnist: ", raw.string());
    const std::vector<uint8_t> bytes =
        detail::read_file_bytes(raw, uint64_t(kIdxMaxBytes) + 64, context, "");
    return parse_idx(bytes, raw.string());
  }
  const std::string context = detail::concat("load_fashion_mnist: ", gz.string());
  const std::vector<uint8_t> compressed = detail::read_file_bytes(
      gz, uint64_t(kIdxMaxBytes), context,
      " (apt-get install dataset-fashion-mnist, or set NMSPARSE_FASHION_MNIST to a directory "
      "holding the files)");
  // The header of 4 dimensions is 20 bytes on top of the data bound.
  const std::vector<uint8_t> bytes = detail::inflate_bounded(compressed, detail::ZFormat::kGzip,
                                                             uint64_t(kIdxMaxBytes) + 20, context)
                                         .bytes;
  return parse_idx(bytes, gz.string());
}

}  // namespace

std::filesystem::path fashion_mnist_default_dir() {
  const char* env = std::getenv("NMSPARSE_FASHION_MNIST");
  if (env != nullptr && *env != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

ImageDataset load_fashion_mnist(const std::filesystem::path& dir, DataSplit split) {
  const std::string prefix = split == DataSplit::kTrain ? "train" : "t10k";
  const std::string images_name = prefix + "-images-idx3-ubyte";
  const std::string labels_name = prefix + "-labels-idx1-ubyte";
  IdxArray images = load_idx_file(dir, images_name);
  IdxArray labels = load_idx_file(dir, labels_name);
  const std::string images_file = (dir / (images_name + ".gz")).string();
  const std::string labels_file = (dir / (labels_name + ".gz")).string();

  NMS_CHECK(images.dims.size() == 3, images_file, ": ", images.dims.size(),
            " dimensions, images need 3 (count, rows, cols; magic 0x00000803)");
  NMS_CHECK(labels.dims.size() == 1, labels_file, ": ", labels.dims.size(),
            " dimensions, labels need 1 (count; magic 0x00000801)");
  NMS_CHECK(images.dims[0] > 0 && images.dims[1] > 0 && images.dims[2] > 0, images_file,
            ": empty: ", images.dims[0], " images of ", images.dims[1], " x ", images.dims[2]);
  NMS_CHECK(images.dims[0] == labels.dims[0], "count mismatch: ", images_file, " holds ",
            images.dims[0], " images, ", labels_file, " holds ", labels.dims[0], " labels");
  for (size_t i = 0; i < labels.data.size(); ++i) {
    NMS_CHECK(labels.data[i] <= 9, labels_file, ": label ", int(labels.data[i]), " at index ", i,
              " (labels are 0..9)");
  }

  ImageDataset dataset;
  dataset.count = images.dims[0];
  dataset.rows = images.dims[1];
  dataset.cols = images.dims[2];
  dataset.pixels = std::move(images.data);
  dataset.labels = std::move(labels.data);
  return dataset;
}

}  // namespace nms
