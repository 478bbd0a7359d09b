"""Worker: the attention sees a request's kept blocks only.

A freed block is vLLM's null block (id 0) in the worker's block table, so the
slot mapping, which places new tokens by their original positions, is
unchanged: the kept tokens keep their positions (their keys were rotated
there) and new tokens take the next ones.  The CPU attention kernel reads
every block up to a row's seq_len, so before vLLM's CPU metadata builder runs,
each row with holes is compacted: its kept block ids move to the front of the
row and its seq_len drops by block_size per hole.  A hole is always a whole,
full block, so the arithmetic is exact; rows without holes, and steps where no
request has any, pass through untouched (one dictionary test)."""
import dataclasses

import torch


def compact(cm, holes_by_row, block_size):
    """A copy of CommonAttentionMetadata `cm` with the rows in holes_by_row
    ({row: sorted block indices}) compacted; returns (cm', kept) where kept is
    {row: tensor of the original block indices kept, in order}."""
    bt = cm.block_table_tensor.clone()
    seq = cm.seq_lens.clone()
    upper = cm.seq_lens_cpu_upper_bound
    upper = upper.clone() if upper is not None else None
    kept = {}
    for r, holes in holes_by_row.items():
        n = (int(seq[r]) + block_size - 1) // block_size
        drop = [h for h in holes if h < n]
        mask = torch.ones(n, dtype=torch.bool)
        if drop:
            mask[torch.tensor(drop, dtype=torch.long)] = False
        idx = torch.nonzero(mask).flatten()
        bt[r, :len(idx)] = bt[r, :n][idx]
        bt[r, len(idx):n] = 0
        seq[r] -= block_size * len(drop)
        if upper is not None:
            upper[r] -= block_size * len(drop)
        kept[r] = idx
    cm2 = dataclasses.replace(cm, block_table_tensor=bt, seq_lens=seq,
                              max_seq_len=int(seq[:cm.num_reqs].max()) if cm.num_reqs else 0,
                              seq_lens_cpu_upper_bound=upper)
    return cm2, kept



def null_blocks(cm, block_size):
    """{row: sorted block indices} of the null blocks (id 0) within each row's
    seq_len in the batch's block table: the holes, whoever made them (an
    eviction this worker applied, or an adopted session's).  {} for a batch
    without any, found with one vectorised test."""
    n_rows = cm.num_reqs
    if not n_rows:
        return {}
    seq = cm.seq_lens[:n_rows].to("cpu")
    n_blocks = (seq + block_size - 1) // block_size
    width = int(n_blocks.max())
    if width <= 0:
        return {}
    bt = cm.block_table_tensor[:n_rows, :width].to("cpu")
    idx = torch.arange(width).unsqueeze(0)
    mask = (bt == 0) & (idx < n_blocks.unsqueeze(1))
    if not bool(mask.any()):
        return {}
    out = {}
    for r, b in torch.nonzero(mask).tolist():
        out.setdefault(r, []).append(b)
    return out


def zero_in_worker(runner, req_id, blocks):
    """Writes the null block into the worker's own records of request req_id at
    the given block indices (its CachedRequestState and the input batch's block
    table), so that the next step's block table shows the holes."""
    if not blocks:
        return
    st = runner.requests.get(req_id)
    if st is not None:
        for g in st.block_ids:
            for b in blocks:
                if b < len(g):
                    g[b] = 0
    row = runner.input_batch.req_id_to_index.get(req_id)
    if row is not None:
        for t in runner.input_batch.block_table.block_tables:
            for b in blocks:
                t.block_table.np[row, b] = 0
