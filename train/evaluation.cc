#include "train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace ringlab::train {

EvalResult Evaluate(nn::Mlp& model, const Dataset& data, int batch) {
  const int classes = model.layout().num_classes();
  const int features = model.layout().in_features();
  std::vector<float> logits(static_cast<size_t>(batch) * classes);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.size; begin += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, data.size - begin));
    model.Forward(data.x.data() + begin * features, n, logits.data());
    for (int i = 0; i < n; ++i) {
      const float* row = logits.data() + static_cast<size_t>(i) * classes;
      const int64_t label = data.y[begin + i];
      // First largest logit, as torch.argmax returns it.
      const int best =
          static_cast<int>(std::max_element(row, row + classes) - row);
      correct += best == label;
      const double top = row[best];
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += std::exp(row[c] - top);
      loss += std::log(sum) + top - row[label];
    }
  }
  if (data.size == 0) return {};
  return {loss / static_cast<double>(data.size),
          static_cast<double>(correct) / static_cast<double>(data.size)};
}

std::string EvalRecordsToCsv(const std::vector<EvalRecord>& records) {
  std::string csv = "epoch,step,test_loss,test_accuracy,wall_s,bytes_sent\n";
  char line[160];
  for (const EvalRecord& r : records) {
    std::snprintf(line, sizeof(line), "%lld,%lld,%.9g,%.6f,%.6f,%llu\n",
                  static_cast<long long>(r.epoch),
                  static_cast<long long>(r.step), r.test_loss, r.test_accuracy,
                  r.wall_s, static_cast<unsigned long long>(r.bytes_sent));
    csv += line;
  }
  return csv;
}

}  // namespace ringlab::train
