"""Made-up words for the text workloads: pronounceable, distinct, drawn from a seed."""

from __future__ import annotations

import numpy as np

_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou")
_CODAS = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck")


def made_up_words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` different lower-case words of one to three syllables."""
    words, seen = [], set()
    while len(words) < count:
        syllables = rng.integers(1, 4)
        word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                       for _ in range(syllables)) + _CODAS[rng.integers(len(_CODAS))]
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_weights(count: int, exponent: float = 1.1) -> np.ndarray:
    """Word frequencies falling as a power of rank, as in natural text; they sum to 1."""
    weights = 1.0 / np.arange(1, count + 1) ** exponent
    return weights / weights.sum()
