"""A small GPT-style character language model in plain PyTorch, and its optimiser.

Token and position embeddings; pre-norm blocks of causal multi-head self-attention and a 4x
GELU MLP, each added to the residual stream; a final LayerNorm; the output layer's weight tied
to the token embedding (it halves the embedding's parameters and helps a small model). Weights
are drawn from N(0, 0.02), the residual projections' scaled by 1/sqrt(2 n_layer), as GPT-2 does.
Written for torch 1.13, which has no fused attention: the causal mask is built once.

The optimiser is AdamW (weight decay on matrices only, not on biases, LayerNorm gains or
embeddings of position), its learning rate warmed up linearly and decayed by a cosine to a
tenth; gradients are clipped to a global norm before each step.
"""

import math

# name: (n_layer, n_head, n_embd, block_size). The parameter counts are for the Bible's
# vocabulary (73 characters).
CONFIGS = {
    "tiny": (2, 2, 64, 64),      # 0.11M: tests
    "small": (3, 4, 128, 64),    # 0.61M: the default, minutes on 2 cores
    "medium": (4, 4, 256, 128),  # 3.2M
    "large": (6, 6, 384, 128),   # 10.7M
}


def build(torch, config, vocab_size):
    """The model of CONFIGS[config], its parameters drawn from torch's generator as seeded."""
    nn, F = torch.nn, torch.nn.functional
    n_layer, n_head, n_embd, block_size = CONFIGS[config]

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(n_embd, 3 * n_embd)
            self.proj = nn.Linear(n_embd, n_embd)
            # A plain attribute, not a buffer: DDP would broadcast a buffer every step.
            self.mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)).view(
                1, 1, block_size, block_size)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(n_embd, dim=2)
            heads = lambda z: z.view(b, t, n_head, c // n_head).transpose(1, 2)  # noqa: E731
            q, k, v = heads(q), heads(k), heads(v)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // n_head))
            scores = scores.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm(n_embd), SelfAttention()
            self.ln2 = nn.LayerNorm(n_embd)
            self.fc, self.proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.block_size = block_size
            self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)
            self.head = nn.Linear(n_embd, vocab_size, bias=False)
            self.head.weight = self.wte.weight  # tied
            self.apply(self._init)
            for name, p in self.named_parameters():
                if name.endswith("proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        @staticmethod
        def _init(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return Gpt()


def loss(torch, model, x, y):
    """Mean cross-entropy of the next character over the batch's positions."""
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))


def adamw(torch, model, lr, weight_decay):
    """AdamW over the model's parameters: weight decay on the matrices, none on the rest."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and n != "wpe.weight"]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and n != "wpe.weight")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def learning_rate(step, peak, warmup, total):
    """Linear warm-up to peak over warmup steps, then a cosine to peak / 10 at total."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


def sample(torch, model, corpus, prompt, characters, seed):
    """characters generated after prompt, drawn from the model's softmax by a generator seeded
    with seed (temperature 1)."""
    generator = torch.Generator().manual_seed(seed)
    index = {c: i for i, c in enumerate(corpus.vocab)}
    ids = torch.tensor([[index[c] for c in prompt if c in index]], dtype=torch.long)
    with torch.no_grad():
        for _ in range(characters):
            logits = model(ids[:, -model.block_size:])[:, -1, :]
            probs = torch.nn.functional.softmax(logits, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return corpus.decode(ids[0].tolist())
