"""A step's token masses to page masses and refresh bits (docs/design.md §1).

The same rule as kernels/'s mdk_page_mass (md_kernels.h): a page's mass is the
sum of its tokens' masses, and refresh bit k is set when token k's mass times
norm_scale exceeds tau."""
import numpy as np


def block_pages(token_mass, kept_blocks, block_size, tau, norm_scale, page_tokens=16):
    """token_mass: a 1-D tensor over the kept tokens, in the order the attention
    saw them (kept block after kept block, the last one possibly partial);
    kept_blocks: the original block index of each kept block.  Returns
    {page index: (mass, refresh bits)} in original page numbering."""
    tm = token_mass.detach().to("cpu").numpy().astype(np.float32, copy=False)
    n_blk = len(kept_blocks)
    padded = np.zeros(n_blk * block_size, dtype=np.float32)
    padded[:min(len(tm), len(padded))] = tm[:len(padded)]
    ppb = block_size // page_tokens
    per = padded.reshape(n_blk * ppb, page_tokens)
    mass = per.sum(axis=1)
    over = (per * norm_scale) > tau
    bits = (over * (1 << np.arange(page_tokens))).sum(axis=1)
    first = np.asarray(kept_blocks, dtype=np.int64) * ppb
    pidx = (first[:, None] + np.arange(ppb)[None, :]).reshape(-1)
    return {int(p): (float(m), int(b)) for p, m, b in zip(pidx, mass, bits)}
