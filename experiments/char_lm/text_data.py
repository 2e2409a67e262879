"""The character language model's data: the King James Bible as Debian's bible-kjv prints it,
characters as tokens, a fixed train/validation split, and each rank's batches drawn as PyTorch's
DistributedSampler draws them.

The text comes from the `bible` program (package bible-kjv, its data in bible-kjv-text:
tools/setup.sh installs both), asked for every verse from Genesis 1:1 to Revelation 22:21 at a
line width of 80, so that the text does not depend on the terminal: 4,298,239 characters. The
split is by blocks of SPLIT_BLOCK characters in order, every SPLIT_EVERY-th one to validation, so
that both sides hold every book's style (a last-10% split would validate on Revelation alone).

Training examples are the train text's non-overlapping windows of block_size + 1 characters
(inputs and next-character targets); a DistributedSampler over their indices (seed, shuffle,
set_epoch) gives each rank its examples, in batches of batch_size per rank. Validation is
eval_windows windows spread evenly over the validation text, the same on every run.
"""

import hashlib
import os
import subprocess

BIBLE = "/usr/bin/bible"
BIBLE_ARGS = ["-l80", "gen1:1-rev22:21"]
SPLIT_BLOCK = 8192  # characters per split block
SPLIT_EVERY = 10  # every 10th block validates: a 90/10 split
MIN_CHARACTERS = 2_000_000


class DataError(Exception):
    """The text cannot be had or is not the one expected: one error line."""


def missing_bible(bible=BIBLE):
    """Why the text cannot be had here, or '' when the bible program is installed."""
    if os.access(bible, os.X_OK):
        return ""
    return (f"{bible} is missing: the text comes from Debian's bible-kjv (tools/setup.sh "
            f"installs it)")


def read_text(bible=BIBLE):
    """The whole text, as a str."""
    missing = missing_bible(bible)
    if missing:
        raise DataError(missing)
    try:
        result = subprocess.run([bible] + BIBLE_ARGS, capture_output=True, timeout=120,
                                env=dict(os.environ, COLUMNS="80"))
    except (OSError, subprocess.SubprocessError) as e:
        raise DataError(f"{bible} did not run: {e}") from None
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise DataError(f"{bible} exited with status {result.returncode}: {lines[-1]}")
    text = result.stdout.decode("ascii", errors="replace")
    if len(text) < MIN_CHARACTERS:
        raise DataError(f"{bible} printed {len(text)} characters, fewer than "
                        f"{MIN_CHARACTERS} (is bible-kjv-text installed?)")
    return text


def split(text):
    """(train text, validation text): blocks of SPLIT_BLOCK characters, every SPLIT_EVERY-th
    to validation."""
    train, valid = [], []
    for index, begin in enumerate(range(0, len(text), SPLIT_BLOCK)):
        block = text[begin:begin + SPLIT_BLOCK]
        (valid if index % SPLIT_EVERY == SPLIT_EVERY - 1 else train).append(block)
    return "".join(train), "".join(valid)


class Corpus:
    """The text as token ids: vocabulary (sorted characters), train and validation tensors."""

    def __init__(self, torch, text):
        self.text_sha256 = hashlib.sha256(text.encode()).hexdigest()
        self.characters = len(text)
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        train, valid = split(text)
        encode = lambda s: torch.tensor([index[c] for c in s], dtype=torch.long)  # noqa: E731
        self.train, self.valid = encode(train), encode(valid)

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


def windows(tokens, block_size):
    """The number of non-overlapping windows of block_size + 1 tokens in tokens."""
    return (tokens.numel() - 1) // block_size


def window(tokens, block_size, index):
    """(input, target) of window index: tokens[i*T : i*T+T] and the next characters."""
    begin = index * block_size
    chunk = tokens[begin:begin + block_size + 1]
    return chunk[:-1], chunk[1:]


class Windows:
    """The train windows as a map-style dataset, for DistributedSampler and DataLoader."""

    def __init__(self, tokens, block_size):
        self.tokens, self.block_size = tokens, block_size
        self.count = windows(tokens, block_size)

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return window(self.tokens, self.block_size, index)


def batches(torch, corpus, block_size, batch_size, rank, world_size, seed):
    """An endless iterator of (epoch, x, y) this rank's batches: DistributedSampler(seed,
    shuffle=True, drop_last=False) with set_epoch(epoch), DataLoader(batch_size,
    drop_last=True), epoch after epoch."""
    from torch.utils.data import DataLoader, DistributedSampler
    dataset = Windows(corpus.train, block_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield epoch, x, y
        epoch += 1


def validation_batches(torch, corpus, block_size, eval_windows, batch_size):
    """The validation set: eval_windows windows spread evenly over the validation text (every
    book, not only the first), as (x, y) batches of batch_size."""
    available = windows(corpus.valid, block_size)
    count = min(eval_windows, available)
    stride = available // count
    pairs = [window(corpus.valid, block_size, i * stride) for i in range(count)]
    return [(torch.stack([x for x, _ in pairs[b:b + batch_size]]),
             torch.stack([y for _, y in pairs[b:b + batch_size]]))
            for b in range(0, count, batch_size)]
