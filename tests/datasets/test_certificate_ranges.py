"""The certificate's sequence ranges: batches of (producer, sequence) folded in by
`Certificate.merge`, in any order, with repeats, give the ranges and the duplicate count
of the set of sequences seen."""

from __future__ import annotations

import random

from rlmesh_stream.consumers.datasets.certificate import Certificate


def _ranges(seen: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for seq in sorted(seen):
        if out and out[-1][1] + 1 == seq:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def test_batches_in_any_order_with_repeats_give_the_seen_sets_ranges_and_duplicates() -> None:
    rng = random.Random(7)
    for _ in range(200):
        sequences = [s for s in range(rng.randint(1, 300)) if rng.random() < 0.8]
        sent = sequences + rng.sample(sequences, k=len(sequences) // 10)  # some twice
        rng.shuffle(sent)
        certificate, seen, repeats = Certificate(), set(), 0
        while sent:
            cut = rng.randint(1, 40)
            batch, sent = sent[:cut], sent[cut:]
            for seq in batch:
                certificate.saw("p", seq, dead_letter=False)
                repeats += seq in seen
                seen.add(seq)
            certificate.merge()
            producer = certificate.producers["p"]
            assert producer["ranges"] == _ranges(seen)
            assert producer["duplicates"] == repeats
