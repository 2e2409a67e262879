// Test-set evaluation: the mean cross-entropy and the accuracy of a model on a
// labelled data set, as a PyTorch evaluation loop computes them
// (F.cross_entropy(reduction="sum") / n and argmax == label), in batches.
#ifndef RINGLAB_TRAIN_EVALUATION_H_
#define RINGLAB_TRAIN_EVALUATION_H_

#include <cstdint>
#include <vector>

#include "nn/mlp.h"
#include "train/dataset.h"

namespace ringlab::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of samples whose largest logit is the label
};

// Logits in batches of `batch` (a model's Forward); the loss is accumulated in
// double from each row's log-softmax, so its value does not depend on the
// batch size beyond float rounding of the logits themselves. An empty data set
// gives zeros.
EvalResult Evaluate(nn::Mlp& model, const Dataset& data, int batch = 1000);

// One evaluation as eval.csv records it.
struct EvalRecord {
  int64_t epoch = 0;  // completed epochs
  int64_t step = 0;   // steps taken
  double test_loss = 0;
  double test_accuracy = 0;
  double wall_s = 0;  // training time so far, evaluations excluded
  uint64_t bytes_sent = 0;
};

std::string EvalRecordsToCsv(const std::vector<EvalRecord>& records);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_EVALUATION_H_
