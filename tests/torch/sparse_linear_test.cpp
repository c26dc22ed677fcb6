#include <gtest/gtest.h>

#include "nmsparse/torch/sparse_linear.h"

TEST(SparseLinear, DenseIsLinear) {
  nms::SparseLinear layer(8, 4);
  auto x = torch::randn({3, 8});
  auto y = layer->forward(x);
  EXPECT_TRUE(torch::allclose(y, torch::nn::functional::linear(x, layer->weight, layer->bias)));
}
