#include "train/evaluation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/mlp.h"

namespace ringlab::train {
namespace {

// A 2→3 linear model whose logits are the inputs' first two features and
// their sum, so every expected value is computable by hand.
std::unique_ptr<nn::Mlp> Model() {
  auto model = nn::CreateMlp(nn::Device::kCpu, nn::MlpLayout({2, 3}));
  const std::vector<float> params = {1, 0, 0, 1, 1, 1, 0, 0, 0};
  model->SetParams(params.data());
  return model;
}

TEST(EvaluationTest, LossAndAccuracyByHandInAnyBatchSize) {
  Dataset data;
  data.size = 3;
  data.features = 2;
  data.x = {2, 0, 0, 1, -1, -1};  // logits (2,0,2) (0,1,1) (-1,-1,-2)
  data.y = {0, 2, 1};
  // Ties go to the first largest logit (torch.argmax): rows 0 and 2 pick
  // class 0, row 1 picks class 1.
  auto model = Model();
  auto ce = [](std::vector<double> z, int label) {
    double s = 0;
    for (double v : z) s += std::exp(v);
    return std::log(s) - z[label];
  };
  const double expected_loss =
      (ce({2, 0, 2}, 0) + ce({0, 1, 1}, 2) + ce({-1, -1, -2}, 1)) / 3;
  for (int batch : {1, 2, 3, 1000}) {
    const EvalResult r = Evaluate(*model, data, batch);
    EXPECT_NEAR(r.loss, expected_loss, 1e-12) << "batch " << batch;
    EXPECT_DOUBLE_EQ(r.accuracy, 1.0 / 3) << "batch " << batch;
  }
  data.size = 0;
  EXPECT_EQ(Evaluate(*model, data).accuracy, 0.0);
}

TEST(EvaluationTest, CsvHasTheDocumentedColumns) {
  const std::string csv = EvalRecordsToCsv({{1, 469, 0.5, 0.8125, 12.5, 1000}});
  EXPECT_EQ(csv,
            "epoch,step,test_loss,test_accuracy,wall_s,bytes_sent\n"
            "1,469,0.5,0.812500,12.500000,1000\n");
}

}  // namespace
}  // namespace ringlab::train
