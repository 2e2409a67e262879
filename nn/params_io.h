// An Mlp's parameters as files, the way PyTorch code without torch.save can
// np.save/np.load a state_dict: <dir>/<state_dict name>.npy per tensor
// (fc1.weight.npy, fc1.bias.npy, ...), in the MLP's layout. Checkpoints, the
// trainer's final/ and --init_dir use it; .npy itself is //io's.
#ifndef RINGLAB_NN_PARAMS_IO_H_
#define RINGLAB_NN_PARAMS_IO_H_

#include <string>

#include "nn/mlp.h"

namespace ringlab::nn {

// Writes every tensor of `layout` from the flat buffer `params` (atomically,
// file by file). Throws io::NpyError when a file cannot be written.
void SaveParams(const std::string& dir, const MlpLayout& layout,
                const float* params);

// Reads every tensor into the flat buffer `params`, checking each file's
// shape against the layout: throws io::NpyError naming the file, the expected
// and the found shape, and leaves params untouched on any error.
void LoadParams(const std::string& dir, const MlpLayout& layout, float* params);

// What LoadParams checks, from the files' headers only (no values read).
void CheckParamsDir(const std::string& dir, const MlpLayout& layout);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_PARAMS_IO_H_
