#!/usr/bin/python3
"""A small PyTorch training script, as a user writes one, with the three lines compare needs
(marked "compare"). An MLP learns to classify points labelled by a fixed random "teacher"
network; every 50 steps it logs its held-out accuracy. Under torchrun-style launchers each rank
draws its own shard of the training set.

    python3 example_train.py --steps 300                   # alone, as any script
    bazel run -c opt //experiments:compare -- --syncs=pytorch_ddp,allreduce,diloco \\
        -- python3 experiments/compare/example_train.py --steps 300
"""

import argparse
import os

import torch
import ringlab_compare  # compare

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--batch_size", type=int, default=64)
args = parser.parse_args()
rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

# The data: 32 features, 10 classes given by a random teacher network (the same on every rank).
data = torch.Generator().manual_seed(1234)
teacher = torch.randn(32, 10, generator=data)
x = torch.randn(24000, 32, generator=data)
y = (torch.tanh(x) @ teacher).argmax(dim=1)
train_x, train_y, test_x, test_y = x[:20000], y[:20000], x[20000:], y[20000:]
shard = torch.arange(rank, 20000, world)  # this rank's examples

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
model, optimizer = ringlab_compare.wrap(model, optimizer)  # compare

order = torch.Generator().manual_seed(rank)
for step in range(args.steps):
    batch = shard[torch.randint(len(shard), (args.batch_size,), generator=order)]
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
    loss.backward()
    optimizer.step()
    accuracy = None
    if (step + 1) % 50 == 0:
        with torch.no_grad():
            accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
        if rank == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}, test accuracy {accuracy:.4f}")
    ringlab_compare.log(loss.item(), metric=accuracy)  # compare
