// The data tensors shared by training and calibration (train_data.h).
#include "torch/train/train_data.h"

#include <algorithm>

#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/data/text_corpus.h"

namespace nms {

ImageTensors image_tensors(const ImageDataset& d, int64_t limit, bool normalize,
                           const char* which) {
  NMS_CHECK(d.count > 0 && d.rows > 0 && d.cols > 0, "the ", which, " images are empty (count ",
            d.count, ", ", d.rows, "x", d.cols, ")");
  NMS_CHECK(static_cast<int64_t>(d.pixels.size()) == d.count * d.rows * d.cols &&
                static_cast<int64_t>(d.labels.size()) == d.count,
            "the ", which, " images hold ", d.pixels.size(), " pixels and ", d.labels.size(),
            " labels for ", d.count, " images of ", d.rows, "x", d.cols);
  const int64_t n = limit > 0 ? std::min(limit, d.count) : d.count;
  ImageTensors t;
  t.x =
      torch::from_blob(const_cast<uint8_t*>(d.pixels.data()), {n, 1, d.rows, d.cols}, torch::kUInt8)
          .to(torch::kFloat)
          .div_(255.0f);
  if (normalize) t.x.sub_(kFashionMean).div_(kFashionStd);
  t.y =
      torch::from_blob(const_cast<uint8_t*>(d.labels.data()), {n}, torch::kUInt8).to(torch::kLong);
  return t;
}

TextTensors text_tensors(const std::string& text, int64_t context) {
  const CharVocab vocab = CharVocab::from_text(text);
  TextTensors t;
  t.vocab = vocab.size();
  t.ids = vocab.encode(text);
  const auto n = static_cast<int64_t>(t.ids.size());
  t.split = n * 9 / 10;
  const int64_t window = context + 1;
  NMS_CHECK(t.split >= window && n - t.split >= window, "the corpus (", n,
            " characters) is too short for context ", context);
  return t;
}

std::vector<int64_t> charlm_window_starts(uint64_t seed, int64_t step, int64_t count, int64_t split,
                                          int64_t context) {
  const CounterRng rng(seed, static_cast<uint64_t>(step));
  const int64_t span = split - (context + 1) + 1;
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    starts[static_cast<size_t>(b)] = std::min<int64_t>(
        static_cast<int64_t>(rng.uniform_double(static_cast<uint64_t>(b)) * span), span - 1);
  }
  return starts;
}

std::pair<torch::Tensor, torch::Tensor> text_batch(const std::vector<int64_t>& ids,
                                                   const std::vector<int64_t>& starts,
                                                   int64_t context) {
  const auto b = static_cast<int64_t>(starts.size());
  torch::Tensor x = torch::empty({b, context}, torch::kLong);
  torch::Tensor y = torch::empty({b, context}, torch::kLong);
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const int64_t* src = ids.data() + starts[static_cast<size_t>(r)];
    std::copy(src, src + context, px + r * context);
    std::copy(src + 1, src + context + 1, py + r * context);
  }
  return {x, y};
}

}  // namespace nms
