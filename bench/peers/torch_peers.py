"""
torch_peers.py - the PyTorch code a user would write instead of prnn: the
log-space scan, a minGRU layer on it (Feng et al. 2024, "Were RNNs All We
Needed?", whose reference code scans in log space), and the residual
minGRU language model that `prnn train` trains.

Log space: for positive a and b, h_t = sum_s (prod_{s<r<=t} a_r) b_s, so with
A = cumsum(log a),  log h = A + logcumsumexp(log b - A). The scan math runs in
fp32 whatever the storage type (a bf16 cumsum over thousands of steps would
be meaningless). Import needs torch.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def logspace_scan(a, b):
    """h_t = a_t h_{t-1} + b_t along the last axis (contiguous), a > 0, b > 0, h_{-1} = 0."""
    A = torch.cumsum(torch.log(a.float()), dim=-1)
    h = torch.exp(A + torch.logcumsumexp(torch.log(b.float()) - A, dim=-1))
    return h.to(a.dtype)


def log_g(x):
    """log of minGRU's positive activation g(v) = v + 1/2 (v >= 0), sigma(v) (v < 0)."""
    return torch.where(x >= 0, torch.log(F.relu(x) + 0.5), -F.softplus(-x))


class MinGRU(nn.Module):
    """minGRU over (B, T, D) -> (B, T, H), log-space scan along T (dim 1), as
    in the paper's reference code; gates from one Linear (bias on)."""

    def __init__(self, D, H):
        super().__init__()
        self.lin = nn.Linear(D, 2 * H)

    def forward(self, x):
        k, n = self.lin(x).float().chunk(2, dim=-1)
        log_z = -F.softplus(-k)        # log sigma(k)
        log_a = -F.softplus(k)         # log (1 - sigma(k))
        A = torch.cumsum(log_a, dim=1)
        h = torch.exp(A + torch.logcumsumexp(log_z + log_g(n) - A, dim=1))
        return h.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class MinGRULM(nn.Module):
    """Embedding, `layers` x (x + minGRU(RMSNorm(x))), RMSNorm, linear head:
    the model of include/prnn_model.h with minGRU cells."""

    def __init__(self, vocab=256, dim=1024, layers=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        norm = getattr(nn, "RMSNorm", RMSNorm)  # PyTorch's own where it has one
        self.norms = nn.ModuleList(norm(dim, eps=1e-5) for _ in range(layers))
        self.cells = nn.ModuleList(MinGRU(dim, dim) for _ in range(layers))
        self.norm_f = norm(dim, eps=1e-5)
        self.head = nn.Linear(dim, vocab)
        for c in self.cells:
            bound = 1 / math.sqrt(dim)
            nn.init.uniform_(c.lin.weight, -bound, bound)
            nn.init.zeros_(c.lin.bias)

    def forward(self, ids):
        x = self.emb(ids)
        for norm, cell in zip(self.norms, self.cells):
            x = x + cell(norm(x))
        return self.head(self.norm_f(x))


def lm_loss(model, ids, targets):
    logits = model(ids)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
