"""A CSV file with the columns of the Cleveland heart-disease table that keras.io's
structured-data examples read (``heart.csv``), drawn locally, and its reading into a DataFrame.

Each column has the range and type of the original (integer categories, one string category,
``thal``, integer and float measurements); ``target`` is drawn from a logistic model of several
columns (``thal``, ``cp``, ``ca``, ``thalach``, ``oldpeak``, ``exang``, ``sex``), so that a
model that reads them does clearly better than the majority class, and none alone decides.

The examples read the file with pandas. Where pandas is not installed (it is no dependency of
tfopt), :func:`read_table` returns the same columns as a dict of NumPy arrays, with the dtypes
``pandas.read_csv`` gives them (int64, float64, str objects): ``dict(dataframe)``, which is
what the examples hand to ``tf.data.Dataset.from_tensor_slices``, is that dict.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

COLUMNS = ("age", "sex", "cp", "trestbps", "chol", "fbs", "restecg", "thalach", "exang",
           "oldpeak", "slope", "ca", "thal", "target")
TARGET = "target"
SPLIT_SEED = 1337  # the examples' random_state for the validation sample


def pandas_or_none():
    """The pandas module, or None where it is not installed."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def write_heart_csv(path: Path, rng: np.random.Generator, rows: int) -> None:
    """``rows`` patients with the original's columns, written as ``heart.csv`` is."""
    age = np.clip(np.round(rng.normal(54, 9, rows)), 29, 77).astype(int)
    sex = (rng.random(rows) < 0.68).astype(int)
    cp = rng.choice([0, 1, 2, 3, 4], size=rows, p=[0.05, 0.15, 0.3, 0.1, 0.4])
    trestbps = np.clip(np.round(rng.normal(131, 17, rows)), 94, 200).astype(int)
    chol = np.clip(np.round(rng.normal(246, 50, rows)), 126, 564).astype(int)
    fbs = (rng.random(rows) < 0.15).astype(int)
    restecg = rng.choice([0, 1, 2], size=rows, p=[0.5, 0.02, 0.48])
    thalach = np.clip(np.round(rng.normal(205 - 1.0 * age, 18)), 71, 202).astype(int)
    exang = (rng.random(rows) < 0.33).astype(int)
    oldpeak = np.round(np.clip(rng.exponential(1.0, rows), 0, 6.2), 1)
    slope = rng.choice([1, 2, 3], size=rows, p=[0.47, 0.46, 0.07])
    ca = rng.choice([0, 1, 2, 3], size=rows, p=[0.58, 0.22, 0.13, 0.07])
    thal = rng.choice(np.array(["normal", "fixed", "reversible"]), size=rows, p=[0.55, 0.07, 0.38])
    score = (1.6 * (thal == "reversible") + 1.0 * (thal == "fixed") + 0.9 * (cp == 4)
             + 0.8 * ca - 0.04 * (thalach - 150) + 0.6 * oldpeak + 0.8 * exang + 0.4 * sex
             - 2.8)
    target = (rng.random(rows) < 1 / (1 + np.exp(-3.0 * score))).astype(int)
    columns = (age, sex, cp, trestbps, chol, fbs, restecg, thalach, exang, oldpeak, slope, ca,
               thal, target)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for row in zip(*columns, strict=True):
            writer.writerow([f"{value:g}" if isinstance(value, float) else value
                             for value in row])


def read_table(path: Path):
    """The CSV as ``pandas.read_csv`` reads it; without pandas, a dict of its columns."""
    pandas = pandas_or_none()
    if pandas is not None:
        return pandas.read_csv(path)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    table = {}
    for index, name in enumerate(header):
        table[name] = _column([row[index] for row in body])
    return table


def _column(values: list[str]) -> np.ndarray:
    for kind in (np.int64, np.float64):
        try:
            return np.array([kind(value) for value in values], dtype=kind)
        except ValueError:
            continue
    return np.array(values, dtype=object)


def num_rows(table) -> int:
    return len(table) if not isinstance(table, dict) else len(next(iter(table.values())))


def split(table) -> tuple[object, object]:
    """(training, validation) tables: a fifth of the rows, drawn with the examples' seed, for
    validation; each keeps the file's row order."""
    rows = num_rows(table)
    picked = np.random.default_rng(SPLIT_SEED).permutation(rows)[: round(0.2 * rows)]
    is_validation = np.zeros(rows, dtype=bool)
    is_validation[picked] = True
    if isinstance(table, dict):
        return ({name: column[~is_validation] for name, column in table.items()},
                {name: column[is_validation] for name, column in table.items()})
    return table[~is_validation], table[is_validation]


def labels_of(table) -> np.ndarray:
    return np.asarray(table[TARGET])


def table_to_dataset(table):
    """The examples' ``dataframe_to_dataset``: a copy without ``target``, sliced with the
    labels into examples, shuffled over the whole table."""
    import tensorflow as tf

    table = dict(table) if isinstance(table, dict) else table.copy()
    labels = table.pop(TARGET)
    dataset = tf.data.Dataset.from_tensor_slices((dict(table), labels))
    return dataset.shuffle(buffer_size=num_rows(table))


def table_kind(table=None) -> str:
    """What ``table`` is (or, given none, what :func:`read_table` returns here), for reports:
    a pandas DataFrame or, without pandas, a dict."""
    if isinstance(table, dict) or (table is None and pandas_or_none() is None):
        return "dict of NumPy columns (pandas is not installed)"
    return "pandas.DataFrame"
