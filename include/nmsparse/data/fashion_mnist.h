// Fashion-MNIST (Xiao, Rasul and Vollgraf 2017): 60,000 training and 10,000 test images of 28×28
// gray pixels in 10 clothing classes, as packaged by Debian (`apt-get install
// dataset-fashion-mnist`, files under /usr/share/datasets/fashion-mnist/):
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   (kTrain)
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    (kTest)
// gzip-compressed IDX files (see idx.h). The same files of the original MNIST load too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace nms {

struct ImageDataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major per image, 0..255
  std::vector<uint8_t> labels;  // count, 0..9
};

enum class DataSplit { kTrain, kTest };

// $NMSPARSE_FASHION_MNIST if set (and not empty), else /usr/share/datasets/fashion-mnist (Debian
// package dataset-fashion-mnist).
std::filesystem::path fashion_mnist_default_dir();

// Reads the images and labels of `split` from `dir`: "<name>.gz" (gunzipped with zlib, at most
// kIdxMaxBytes of output), or the uncompressed "<name>" when only that exists. Throws nms::Error
// naming the file and the defect: missing (with the hint `apt-get install dataset-fashion-mnist`),
// corrupt gzip, bad magic, truncated data, trailing bytes, absurd dimensions (idx.h), an empty
// set, images that are not 3-D or labels that are not 1-D, image and label counts that differ,
// and a label > 9 (with its index).
ImageDataset load_fashion_mnist(const std::filesystem::path& dir, DataSplit split);

}  // namespace nms
