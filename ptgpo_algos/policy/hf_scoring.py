"""How the transformers policy scores: candidates after a shared prompt (the KV cache computed once,
every candidate packed into one row after it) or whole prompt+response rows, a chunk of the output
layer at a time. The trainer's scores (``score``: the update's forward passes, pi_old's and the
reference's) go, with ``share_prefixes``, through a token trie of the decisions' prompt+response (or
prompt+candidate) rows instead, every prefix the rows share computed once
(:mod:`~ptgpo_algos.policy.shared_prefix`). :class:`PolicyScoring` is the scoring half of
:class:`~ptgpo_algos.policy.hf.CausalLMPolicy` (its module docstring tells the computation); it reads
the policy's model, padding id, device, precision and ``score``, ``temperature`` and ``max_rows``
settings."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ptgpo_algos.records import Decision
from ptgpo_algos.policy.base import ScoredBatch
from ptgpo_algos.policy.batching import distinct, forward_with_cache, left_pad, position_ids, right_pad
from ptgpo_algos.policy.shared_prefix import attention_mask, pack_prefix_tree
from ptgpo_algos.policy.token_logprobs import token_logprobs

__all__ = ["PolicyScoring", "ROW_SEQUENCES", "candidate_chunks", "shared_row_tokens"]


def _context_key(pair) -> tuple:
    prompt, candidates = pair
    return tuple(prompt), tuple(map(tuple, candidates))


def candidate_chunks(counts: Sequence[int], max_rows: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive contexts whose candidate rows (``counts``) add up to at most
    ``max_rows``; a context with more rows than that is a chunk of its own."""
    chunks, start = [], 0
    while start < len(counts):
        rows, stop = 0, start
        while stop < len(counts) and (stop == start or rows + counts[stop] <= max_rows):
            rows += counts[stop]
            stop += 1
        chunks.append((start, stop))
        start = stop
    return chunks


class PolicyScoring:
    """Log-probabilities of candidates and responses, with or without gradients (see the module docstring)."""

    def _hidden(self, cache=None, **inputs) -> tuple[torch.Tensor, Any]:
        """The decoder's last hidden states (after the final norm) and its cache: no output layer."""
        return forward_with_cache(self._base().get_decoder(), cache, **inputs)

    def prompt_states(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """The decoder's last hidden state at each prompt's last token, ``(batch, hidden)``, with gradients
        (a value head's input: the state a decision is taken in, before any of its tokens)."""
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        with self.computing():
            hidden, _ = self._through_root(self._hidden, input_ids=ids, attention_mask=mask,
                                           position_ids=position_ids(mask))
        return hidden[:, -1, :]

    def _token_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
        """``(log p, entropy)`` of ``targets`` (``(N,)``) predicted from ``hidden`` (``(N, H)``)."""
        head = self._base().get_output_embeddings()
        if not isinstance(head, torch.nn.Linear):
            raise TypeError(f"the model's output layer is a {type(head).__name__}, not a linear layer: adapters on "
                            "lm_head are not supported; leave lm_head out of lora.target_modules")
        return token_logprobs(hidden, head.weight, targets, bias=head.bias, temperature=temperature,
                              chunk=self.logprob_chunk, compute_dtype=self.autocast_dtype or head.weight.dtype)

    def _through_root(self, compute, *args: Any, **kwargs: Any) -> Any:
        """``compute(*args, **kwargs)``, run as the forward of the FSDP root when the model is sharded:
        scoring calls the decoder and the output layer directly, and only the root's forward gathers
        the root unit's parameters (embeddings, final norm, output layer) and reduces their gradients."""
        if self.root is None:
            return compute(*args, **kwargs)
        return self.root(compute, *args, **kwargs)

    # ================================================================== shared computations
    def _candidate_logprobs(
        self, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], cached: bool
    ) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        """Per-token log-probs of each candidate given its prompt, and each candidate's score.

        Returns ``token_logprobs[i][k]`` (1-D tensor) and ``scores[i]`` (1-D, one per candidate).
        Contexts are processed in chunks of at most ``max_rows`` candidate rows. Identical contexts
        are computed once and share their tensors (gradients add up through them).
        """
        index, first = distinct(zip(prompts, candidates), _context_key)
        if len(first) < len(prompts):
            lp, sc = self._candidate_logprobs([prompts[i] for i in first], [candidates[i] for i in first], cached)
            return [lp[j] for j in index], [sc[j] for j in index]
        token_logprobs: list[list[torch.Tensor]] = []
        scores: list[torch.Tensor] = []
        for start, stop in candidate_chunks([len(c) for c in candidates], self.max_rows):
            compute = self._cached_candidates if cached and not self.gradient_checkpointing else self._packed_candidates
            lp, sc = compute(prompts[start:stop], candidates[start:stop])
            token_logprobs += lp
            scores += sc
        return token_logprobs, scores

    def one_chunk_parts(self, decisions: Sequence[Decision]) -> list[list[int]]:
        """``decisions``' indices cut, in order, into the fewest consecutive parts that :meth:`score`
        computes in one chunk each (a recurring context counts once in its part). With
        ``share_prefixes`` a call is one chunk whatever its passes (sharded, :attr:`agree_passes` gives
        every rank the same number of them)."""
        if self.mode != "choose" or self.share_prefixes:
            return [list(range(len(decisions)))] if decisions else []
        parts: list[list[int]] = []
        seen: set = set()
        rows = 0
        for i, decision in enumerate(decisions):
            key = _context_key((decision.prompt_ids, decision.candidate_ids))
            if key not in seen:
                if parts and rows + len(decision.candidate_ids) > self.max_rows:
                    parts.append([])
                    seen, rows = set(), 0
                seen.add(key)
                rows += len(decision.candidate_ids)
            if not parts:
                parts.append([])
            parts[-1].append(i)
        return parts

    def scoring_passes(self, decisions: Sequence[Decision]) -> int:
        """How many chunks :meth:`score` computes ``decisions`` in: each chunk runs the model the same
        number of times, whatever it holds, so a sharded rank with fewer chunks than another makes up
        the difference with that many idle passes of one decision (one chunk each)."""
        if not decisions:
            return 0
        if self.mode != "choose" or self.share_prefixes:
            return 1
        _, first = distinct(((d.prompt_ids, d.candidate_ids) for d in decisions), _context_key)
        return len(candidate_chunks([len(decisions[i].candidate_ids) for i in first], self.max_rows))

    def _flatten(self, candidates):
        owner, flat = [], []
        for i, cands in enumerate(candidates):
            for cand in cands:
                owner.append(i)
                flat.append(cand)
        return owner, flat

    def _split(self, logp: torch.Tensor, cmask: torch.Tensor, candidates):
        counts = cmask.sum(-1)
        total = (logp * cmask).sum(-1)
        score = total / counts.clamp(min=1) if self.score_mode == "mean" else total
        token_logprobs, scores, row = [], [], 0
        for cands in candidates:
            k = len(cands)
            token_logprobs.append([logp[row + j, : len(cands[j])] for j in range(k)])
            scores.append(score[row : row + k])
            row += k
        return token_logprobs, scores

    def _cached_candidates(self, prompts, candidates):
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        last, cache = forward_with_cache(
            self.model, input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True, logits_to_keep=1
        )
        # One row per prompt holding all its candidates end to end (rather than one row per
        # candidate, which would copy the prompt's KV cache once per candidate): ``segment`` says
        # which candidate a token belongs to (-1: padding), ``offset`` its index within it.
        width = max(1, max(sum(len(c) for c in cands) for cands in candidates))
        packed_ids, segments, offsets, starts = [], [], [], []
        for cands in candidates:
            row_ids, row_segment, row_offset = [], [], []
            for k, cand in enumerate(cands):
                starts.append(len(row_ids))
                row_ids += cand
                row_segment += [k] * len(cand)
                row_offset += range(len(cand))
            padding = width - len(row_ids)
            packed_ids.append(row_ids + [self.pad_id] * padding)
            segments.append(row_segment + [-1] * padding)
            offsets.append(row_offset + [0] * padding)
        cids = torch.tensor(packed_ids, dtype=torch.long, device=self.device)
        segment = torch.tensor(segments, dtype=torch.long, device=self.device)
        offset = torch.tensor(offsets, dtype=torch.long, device=self.device)
        # A token sees the prompt and the earlier tokens of its own candidate; a padding token sees
        # itself only (a query row with nothing to attend to would give NaNs).
        index = torch.arange(width, device=self.device)
        own = (segment[:, :, None] == segment[:, None, :]) & (index[None, :, None] >= index[None, None, :])
        own &= (segment[:, :, None] >= 0) | (index[None, :, None] == index[None, None, :])
        prompt_seen = mask.bool()[:, None, :].expand(-1, width, -1) & (segment >= 0)[:, :, None]
        attention = torch.cat([prompt_seen, own], dim=-1)[:, None]
        position = mask.sum(-1, keepdim=True) + offset
        logits, _ = forward_with_cache(
            self.model, cache, input_ids=cids, attention_mask=attention, position_ids=position, use_cache=True
        )
        # A candidate's first token is predicted by the prompt's last position, each later one by
        # the token before it in the packed row. The float32 log-softmax runs a few prompts at a
        # time (about logprob_chunk positions), so without gradients (rollouts) one slice of it lives.
        logits = torch.cat([last[:, -1:, :], logits], dim=1)
        source = torch.where(offset > 0, index[None, :], torch.zeros_like(offset))
        step = max(1, self.logprob_chunk // width)
        packed = torch.cat([
            F.log_softmax(logits[r : r + step].gather(1, source[r : r + step, :, None].expand(-1, -1, logits.shape[-1]))
                          .float(), dim=-1).gather(-1, cids[r : r + step, :, None]).squeeze(-1)
            for r in range(0, len(candidates), step)
        ])
        owner, flat = self._flatten(candidates)
        lengths = torch.tensor([len(c) for c in flat], dtype=torch.long, device=self.device)
        column = torch.arange(max(1, int(lengths.max())), device=self.device)
        cmask = (column[None, :] < lengths[:, None]).long()
        columns = (torch.tensor(starts, dtype=torch.long, device=self.device)[:, None] + column).clamp(max=width - 1)
        rows = torch.tensor(owner, dtype=torch.long, device=self.device)[:, None]
        logp = packed[rows, columns] * cmask
        return self._split(logp, cmask, candidates)

    def _packed_candidates(self, prompts, candidates):
        owner, flat = self._flatten(candidates)
        # A candidate's score is its tokens' log-probabilities at temperature 1, as in the cached
        # path: the policy's temperature applies once, to the softmax over the scores.
        logp, _, cmask = self._response_logprobs([prompts[i] for i in owner], flat, temperature=1.0,
                                                 with_entropy=False)
        return self._split(logp, cmask, candidates)

    def _response_logprobs(self, prompts, responses, *, temperature: float, with_entropy: bool,
                           entropy_grad: bool = True):
        """Per-token log-probs (and entropies) of ``responses`` given ``prompts`` at ``temperature``, full
        sequences; identical (prompt, response) rows are computed once. Returns ``(B, width)`` tensors:
        log-probs, entropies (None without ``with_entropy``; detached without ``entropy_grad``), mask."""
        index, first = distinct(zip(prompts, responses), lambda pr: (tuple(pr[0]), tuple(pr[1])))
        if len(first) < len(prompts):
            logp, entropy, rmask = self._response_logprobs(
                [prompts[i] for i in first], [responses[i] for i in first], temperature=temperature,
                with_entropy=with_entropy, entropy_grad=entropy_grad,
            )
            take = torch.tensor(index, dtype=torch.long, device=self.device)
            return logp[take], (entropy[take] if entropy is not None else None), rmask[take]
        rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
        ids, mask = right_pad(rows, self.pad_id, self.device)
        hidden, _ = self._hidden(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False)
        # Position p predicts token p+1: the response's tokens are predicted from len(prompt)-1 on.
        row_index, positions, columns, targets = [], [], [], []
        for i, (p, r) in enumerate(zip(prompts, responses)):
            row_index += [i] * len(r)
            positions += range(len(p) - 1, len(p) - 1 + len(r))
            columns += range(len(r))
            targets += r
        place = (torch.tensor(row_index, dtype=torch.long, device=self.device),
                 torch.tensor(columns, dtype=torch.long, device=self.device))
        positions = torch.tensor(positions, dtype=torch.long, device=self.device)
        token_logp, token_entropy = self._token_logprobs(
            hidden[place[0], positions], torch.tensor(targets, dtype=torch.long, device=self.device), temperature)
        return self._rows_of_tokens(place, (len(rows), max(1, max(len(r) for r in responses))), token_logp,
                                    token_entropy if with_entropy else None, entropy_grad)

    def _rows_of_tokens(self, place, shape, token_logp: torch.Tensor, token_entropy: torch.Tensor | None,
                        entropy_grad: bool):
        """``(log-probs, entropies, mask)`` of ``shape`` with each token's figures at ``place`` (its row
        and column), zeros elsewhere; the entropies detached without ``entropy_grad``."""
        rmask = torch.zeros(shape, dtype=torch.long, device=self.device).index_put(place, torch.tensor(1, device=self.device))
        logp = torch.zeros(shape, dtype=token_logp.dtype, device=self.device).index_put(place, token_logp)
        entropy = None
        if token_entropy is not None:
            token_entropy = token_entropy if entropy_grad else token_entropy.detach()
            entropy = torch.zeros(shape, dtype=token_entropy.dtype, device=self.device).index_put(place, token_entropy)
        return logp, entropy, rmask

    # ================================================================== trainer side
    def score(self, decisions: Sequence[Decision], *, entropy_grad: bool = True) -> ScoredBatch:
        """Log-probabilities and entropies of ``decisions`` under the current weights, with gradients
        (the entropies' only with ``entropy_grad``: an update without an entropy bonus skips them)."""
        return self._through_root(self._score, decisions, entropy_grad)

    def _score(self, decisions: Sequence[Decision], entropy_grad: bool) -> ScoredBatch:
        if self.gradient_checkpointing:
            self.model.train()
        prompts = [d.prompt_ids for d in decisions]
        with self.computing():
            if self.mode == "choose":
                candidates = [d.candidate_ids for d in decisions]
                if any(c is None for c in candidates):
                    raise ValueError("choose-mode scoring needs decisions with candidate_ids")
                if self.share_prefixes:
                    owner, flat = self._flatten(candidates)
                    logp, _, cmask, computed = self._shared_prefix_logprobs(
                        [prompts[i] for i in owner], flat, temperature=1.0, with_entropy=False)
                    _, scores = self._split(logp, cmask, candidates)
                else:
                    _, scores = self._candidate_logprobs(prompts, candidates, cached=True)
                    rows = distinct(zip(prompts, candidates), _context_key)[1]
                    if self.gradient_checkpointing:  # one full row per candidate
                        computed = sum(len(prompts[i]) * len(candidates[i]) for i in rows)
                    else:
                        computed = sum(len(prompts[i]) for i in rows)
                    computed += sum(len(c) for i in rows for c in candidates[i])
                return self._choice_scores(decisions, scores, entropy_grad, computed)
            responses = [d.response_ids for d in decisions]
            if self.share_prefixes:
                logp, entropy, rmask, computed = self._shared_prefix_logprobs(
                    prompts, responses, temperature=self.temperature, with_entropy=True, entropy_grad=entropy_grad)
            else:
                logp, entropy, rmask = self._response_logprobs(
                    prompts, responses, temperature=self.temperature, with_entropy=True, entropy_grad=entropy_grad)
                rows = distinct(zip(prompts, responses), lambda pr: (tuple(pr[0]), tuple(pr[1])))[1]
                computed = sum(len(prompts[i]) + len(responses[i]) for i in rows)
        return ScoredBatch(logp, entropy, rmask.float(), computed)

    def _shared_prefix_logprobs(self, prompts, responses, *, temperature: float, with_entropy: bool,
                                entropy_grad: bool = True):
        """:meth:`_response_logprobs` with every shared prefix of the prompt+response rows computed once
        (:mod:`~ptgpo_algos.policy.shared_prefix`); also returns the tokens computed."""
        if any(not p for p in prompts):
            raise ValueError("shared-prefix scoring needs non-empty prompts (a response's first token is "
                             "predicted from the prompt's last)")
        sequences = [list(p) + list(r) for p, r in zip(prompts, responses)]
        plan = pack_prefix_tree(sequences, shared_row_tokens(sequences))
        # The hidden state at the token before each response token predicts it.
        predictors = [(plan.rows[i], column) for i, (p, r) in enumerate(zip(prompts, responses))
                      for column in plan.columns[i][len(p) - 1 : len(p) - 1 + len(r)]]
        hidden_states = self._packed_hidden(plan.packed, predictors)
        row_index = [i for i, r in enumerate(responses) for _ in r]
        columns = [k for r in responses for k in range(len(r))]
        targets = [t for r in responses for t in r]
        token_logp, token_entropy = self._token_logprobs(
            hidden_states, torch.tensor(targets, dtype=torch.long, device=self.device), temperature)
        place = (torch.tensor(row_index, dtype=torch.long, device=self.device),
                 torch.tensor(columns, dtype=torch.long, device=self.device))
        logp, entropy, rmask = self._rows_of_tokens(place, (len(prompts), max(1, max(len(r) for r in responses))),
                                                    token_logp, token_entropy if with_entropy else None, entropy_grad)
        return logp, entropy, rmask, plan.computed_tokens

    def _packed_hidden(self, packed, predictors: Sequence[tuple[int, int]]) -> torch.Tensor:
        """The decoder's last hidden states at ``predictors`` (``(row, column)`` of ``packed``, the
        :class:`~ptgpo_algos.policy.shared_prefix.PackedRow` list), in their order: a few packed rows
        per forward pass, each token attending to its ancestors in the trie."""
        wanted: dict[int, list[tuple[int, int]]] = {}
        for index, (row, column) in enumerate(predictors):
            wanted.setdefault(row, []).append((index, column))
        parts, order = [], []
        ranges = _passes([len(row.tokens) for row in packed])
        # Sharded, every rank runs as many passes as the rank with the most (decided before the first,
        # since each pass is a round of collectives), the extra ones on one padding token.
        ballast = max(0, self.agree_passes(len(ranges)) - len(ranges)) if self.agree_passes else 0
        for start, stop in ranges:
            rows = packed[start:stop]
            out = self._packed_pass(rows)
            taken = [(r, index, column) for r in range(len(rows)) for index, column in wanted.get(start + r, [])]
            order += [index for _, index, _ in taken]
            parts.append(out[torch.tensor([r for r, _, _ in taken], dtype=torch.long, device=self.device),
                             torch.tensor([c for _, _, c in taken], dtype=torch.long, device=self.device)])
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        hidden = torch.cat(parts)[back.to(self.device)]
        for _ in range(ballast):
            # Tied into the result at weight 0, so that the backward runs through it too.
            hidden = hidden + 0.0 * self._packed_pass(pack_prefix_tree([[self.pad_id]], 1).packed).sum()
        return hidden

    def _packed_pass(self, rows) -> torch.Tensor:
        """The decoder's last hidden states of packed ``rows`` in one forward pass."""
        width = max(len(row.tokens) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row.tokens)] = torch.tensor(row.tokens, dtype=torch.long)
            positions[r, : len(row.tokens)] = torch.tensor(row.positions, dtype=torch.long)
        out, _ = self._hidden(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                              attention_mask=attention_mask(rows, width).to(self.device), use_cache=False)
        return out

    def _choice_scores(self, decisions: Sequence[Decision], scores: Sequence[torch.Tensor], entropy_grad: bool,
                       computed: int) -> ScoredBatch:
        logps, ents = [], []
        for d, s in zip(decisions, scores):
            logp = F.log_softmax(s.float() / self.temperature, dim=-1)
            logps.append(logp[d.choice])
            ents.append(-(logp.exp() * logp).sum())
        logprobs = torch.stack(logps)[:, None]
        entropy = torch.stack(ents)[:, None]
        return ScoredBatch(logprobs, entropy if entropy_grad else entropy.detach(), torch.ones_like(logprobs), computed)

    def response_logprobs(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        """Each response's token log-probabilities given its prompt at ``temperature``, without
        gradients (what a rollout engine's own tokens are checked against after a weight sync)."""
        self.model.eval()
        with torch.no_grad(), self.computing():
            logp, _, rmask = self._through_root(self._response_logprobs, prompts, responses, temperature=temperature,
                                                with_entropy=False)
        return [row[: int(m.sum())].tolist() for row, m in zip(logp.float().cpu(), rmask.cpu())]


#: A shared-prefix row holds up to this many times the longest sequence's tokens. Longer rows share
#: more but attend densely over more columns: on the tiny model (a PTGPO mini-batch of 512 choose-mode
#: decisions, sequences up to 141 tokens, one CPU thread) 1, 2, 3, 4 and 6 times took 0.47, 0.33, 0.31,
#: 0.34 and 0.40 CPU seconds forward and backward and computed 18.6, 11.4, 10.0, 9.6 and 9.2 thousand
#: tokens; every row whole, 0.46 seconds and 18.7 thousand.
ROW_SEQUENCES = 3


def shared_row_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """The distinct tokens a shared-prefix row holds at most, for these sequences."""
    return ROW_SEQUENCES * max(1, max(map(len, sequences), default=1))


#: Mask elements (rows x width x width) of one shared-prefix forward pass: bounds the dense mask's memory.
_PASS_MASK = 2**26


def _passes(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of packed rows, each run in one forward pass."""
    out, start = [], 0
    while start < len(lengths):
        stop, width = start + 1, lengths[start]
        while stop < len(lengths) and (stop + 1 - start) * max(width, lengths[stop]) ** 2 <= _PASS_MASK:
            width = max(width, lengths[stop])
            stop += 1
        out.append((start, stop))
        start = stop
    return out
