"""Independent NumPy implementations of the paper's formulas, used as test oracles."""

import math

import numpy as np


def positional_encoding(length, d_model):
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** (i / d_model)))
            if i + 1 < d_model:
                pe[pos, i + 1] = math.cos(pos / (10000 ** (i / d_model)))
    return pe


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, mask=None):
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); mask True = keep."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores)
    return weights @ v, weights


def dense(layer, x):
    kernel, bias = (np.asarray(w) for w in layer.weights)
    return x @ kernel + bias


def multi_head_attention(mha, query, value, mask=None):
    """Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""
    h, dk = mha.num_heads, mha.head_dim
    q, k, v = dense(mha.query_dense, query), dense(mha.key_dense, value), dense(mha.value_dense, value)
    if mask is not None and mask.ndim == 4:  # (B, 1, Tq|1, Tk): the same for every head
        mask = mask[:, 0]
    heads, weights = [], []
    for i in range(h):
        sl = slice(i * dk, (i + 1) * dk)
        out, w = attention(q[..., sl], k[..., sl], v[..., sl], mask)
        heads.append(out)
        weights.append(w)
    return dense(mha.output_dense, np.concatenate(heads, axis=-1)), np.stack(weights, axis=1)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def label_smoothed_loss(labels, logits, epsilon, pad_id=0):
    total, count = 0.0, 0
    vocab = logits.shape[-1]
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] == pad_id:
                continue
            logp = np.log(softmax(logits[b, t].astype(np.float64)))
            target = np.full(vocab, epsilon / vocab)
            target[labels[b, t]] += 1.0 - epsilon
            total += -(target * logp).sum()
            count += 1
    return total / count


def transformer_lr(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def _lowbias32(h):
    h = h.astype(np.uint64)
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x846CA68B) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def dropout_bits(seed, size):
    """The dropout hash of keras_transformer.layers.dropout, written out in uint64 NumPy with
    explicit wrap-around: key = mix(mix(s0) + s1 * golden), bits = mix(mix(i ^ key) + key)."""
    s0, s1 = (np.uint64(int(s) % 2**32) for s in seed)
    key = _lowbias32((_lowbias32(np.array(s0)) + s1 * 0x9E3779B9) & 0xFFFFFFFF)
    positions = np.arange(size, dtype=np.uint64)
    return _lowbias32((_lowbias32(positions ^ key) + key) & 0xFFFFFFFF).astype(np.uint32)


def copy_mixture(logits, gate_logit, attention, source_ids):
    """The pointer-generator's p(w) = (1 - g) softmax(logits)(w) + g sum_{i: src_i = w} a_i,
    one row at a time: logits (N, V), gate_logit (N,), attention (N, S), source_ids (N, S)."""
    logits = np.asarray(logits, np.float64)
    out = np.zeros_like(logits)
    for n in range(logits.shape[0]):
        g = 1.0 / (1.0 + math.exp(-float(gate_logit[n])))
        out[n] = (1.0 - g) * softmax(logits[n])
        for i, w in enumerate(source_ids[n]):
            out[n, int(w)] += g * float(attention[n, i])
    return out


def coverage_loss(attention, target_mask):
    """See et al.'s coverage loss, one position at a time: attention (B,T,S), target_mask
    (B,T) -> the mean over masked-in positions of sum_i min(a_t,i, sum_{t'<t} a_t',i)."""
    total, count = 0.0, 0
    for b in range(attention.shape[0]):
        coverage = np.zeros(attention.shape[2])
        for t in range(attention.shape[1]):
            if target_mask[b, t]:
                total += np.minimum(attention[b, t], coverage).sum()
                count += 1
            coverage = coverage + attention[b, t]
    return total / max(count, 1)


def copied_span_labels(article_words, summary_words):
    """Gehrmann et al.'s content labels by brute force: from each span start, the longest run
    of article words found in the summary by a string search over every length (words joined
    by NUL, so a match is whole words), then labelled 1 at the span's first occurrence."""
    source = [w.lower() for w in article_words]
    reference = "\0" + "\0".join(w.lower() for w in summary_words) + "\0"
    labels, seen, start = [0] * len(source), [], 0
    while start < len(source):
        length = 0
        for size in range(len(source) - start, 0, -1):
            if "\0" + "\0".join(source[start:start + size]) + "\0" in reference:
                length = size
                break
        if length == 0:
            start += 1
            continue
        span = source[start:start + length]
        if span not in seen:
            seen.append(span)
            labels[start:start + length] = [1] * length
        start += length
    return labels


def roc_auc(scores, labels):
    """The probability that a random positive scores above a random negative (a tie counts
    one half), over every pair."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y]
    negatives = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))
