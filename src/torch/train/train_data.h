// Private: the tensors that the training loop (train.cpp) and calibration (calibrate.cpp) build
// from a TrainData, so that both see the same images, the same normalisation and the same charlm
// windows.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nmsparse/data/fashion_mnist.h"

namespace nms {

// Fashion-MNIST's pixel mean and standard deviation (of x/255 over the training set).
inline constexpr float kFashionMean = 0.2860f;
inline constexpr float kFashionStd = 0.3530f;

struct ImageTensors {
  torch::Tensor x;  // [N, 1, rows, cols] float32
  torch::Tensor y;  // [N] int64
};
// The first `limit` images of `d` (all when limit <= 0) as x/255, then (x − mean)/std when
// `normalize`. Throws nms::Error for an empty or inconsistent dataset, naming `which`.
ImageTensors image_tensors(const ImageDataset& d, int64_t limit, bool normalize, const char* which);

struct TextTensors {
  std::vector<int64_t> ids;  // the corpus encoded with CharVocab::from_text
  int64_t vocab = 0;         // CharVocab size
  int64_t split = 0;         // ids[0, split) train, ids[split, end) validation (90 / 10)
};
// Encodes `text` and splits it; throws unless both parts hold a window of context + 1 ids.
TextTensors text_tensors(const std::string& text, int64_t context);

// The starts of the `count` training windows of charlm step `step`: window b starts at
// floor(u_b · span) with u_b = CounterRng(seed, step).uniform_double(b) and
// span = split − (context + 1) + 1 (every window lies inside the training part).
std::vector<int64_t> charlm_window_starts(uint64_t seed, int64_t step, int64_t count, int64_t split,
                                          int64_t context);

// Rows `starts` of `ids`: inputs ids[s, s+context), targets ids[s+1, s+context+1), int64.
std::pair<torch::Tensor, torch::Tensor> text_batch(const std::vector<int64_t>& ids,
                                                   const std::vector<int64_t>& starts,
                                                   int64_t context);

}  // namespace nms
