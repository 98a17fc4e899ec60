"""A time series and an LSTM: keras.io's "Timeseries forecasting for weather prediction".

Source: https://keras.io/examples/timeseries/timeseries_weather_forecasting/
(https://github.com/keras-team/keras-io/blob/master/examples/timeseries/timeseries_weather_forecasting.py).

As the example: a weather record every 10 minutes with the Jena climate table's 14 columns, of
which the example's seven are kept (pressure, temperature, saturation vapour pressure, vapour
pressure deficit, specific humidity, air density, wind speed), each normalised by the mean and
deviation of the first 71.5 % of the rows (the training part); windows of the past 720 rows
sampled hourly (120 steps) predict the temperature 72 rows after the window's end, through
``keras.utils.timeseries_dataset_from_array`` (batches of 256) for training and validation;
LSTM(32), Dense(1); Adam(0.001), mean squared error; ``model.fit(dataset_train,
epochs=10, validation_data=dataset_val, callbacks=[EarlyStopping(patience=5),
ModelCheckpoint(save_best_only=True, save_weights_only=True)])``. The checkpoint is written to
the data folder, named ``.weights.h5`` as Keras 3 requires of weights files.

Data: a synthetic climate drawn locally: temperature from a yearly and a daily cycle plus
weather anomalies that follow the pressure with a lag of half a day, humidity, vapour
pressures, density and wind derived from them as the physics relates them, with noise; so
the future temperature is predictable from the window (the daily cycle, persistence, the
pressure's lead), and a model that learns it beats the constant prediction clearly.

Scaled: 16,000 rows (about 111 days) instead of the 420,551 of 2009-2016 (``scale``
multiplies); the model and the epochs are the example's.
"""

from __future__ import annotations

import keras
import numpy as np

from tfopt.bench.workloads._base import Data, Workload, fresh_folder, scaled_count

NAME = "weather_lstm"
FEATURE_KEYS = ("p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)",
                "VPact (mbar)", "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)",
                "wv (m/s)", "max. wv (m/s)", "wd (deg)")
SELECTED = (0, 1, 5, 7, 8, 10, 11)
SPLIT_FRACTION = 0.715
STEP = 6
PAST = 720
FUTURE = 72
LEARNING_RATE = 0.001
BATCH = 256
DAY = 144  # rows: one every 10 minutes
YEAR = 365 * DAY


def _anomaly(rng, rows: int, correlation_rows: float, scale: float) -> np.ndarray:
    """An AR(1) series with the given correlation length and standard deviation."""
    rho = np.exp(-1.0 / correlation_rows)
    shocks = rng.normal(0, scale * np.sqrt(1 - rho ** 2), rows)
    series = np.empty(rows)
    series[0] = rng.normal(0, scale)
    for index in range(1, rows):
        series[index] = rho * series[index - 1] + shocks[index]
    return series


def climate(rng: np.random.Generator, rows: int) -> np.ndarray:
    """(rows, 14) weather records with the Jena table's columns, in their units."""
    t = np.arange(rows) + rng.integers(YEAR)
    pressure_anomaly = _anomaly(rng, rows + FUTURE, 3 * DAY, 1.0)
    lagged = pressure_anomaly[:rows]  # the temperature follows the pressure half a day later
    pressure = 989 + 8 * pressure_anomaly[FUTURE:]
    temperature = (9 - 9 * np.cos(2 * np.pi * t / YEAR) - 4 * np.cos(2 * np.pi * t / DAY)
                   + 3.5 * lagged + _anomaly(rng, rows, DAY, 1.5) + rng.normal(0, 0.3, rows))
    humidity = np.clip(76 + 12 * np.cos(2 * np.pi * t / DAY) - 4 * lagged
                       + _anomaly(rng, rows, DAY / 2, 8), 15, 100)
    vp_max = 6.1078 * np.exp(17.27 * temperature / (temperature + 237.3))
    vp_act = vp_max * humidity / 100
    dew = 237.3 * np.log(vp_act / 6.1078) / (17.27 - np.log(vp_act / 6.1078))
    wind = np.abs(1.5 + _anomaly(rng, rows, DAY / 4, 1.2))
    columns = (pressure, temperature, temperature + 273.15 + 0.0098 * (1000 - pressure) * 8,
               dew, humidity, vp_max, vp_act, vp_max - vp_act, 622 * vp_act / pressure,
               1000 * vp_act / pressure,
               pressure * 100 / (287.05 * (temperature + 273.15)) * 1000,
               wind, wind * rng.uniform(1.3, 2.0, rows),
               (180 + 90 * np.sin(2 * np.pi * t / (5 * DAY)) + rng.normal(0, 40, rows)) % 360)
    return np.stack(columns, axis=1).astype(np.float64)


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """The weather records, in memory; ``folder`` holds the checkpoint the fit writes."""
    rng = np.random.default_rng(seed)
    rows = scaled_count(16000, scale, 6000)
    folder = fresh_folder(folder, NAME, seed, scale)
    records = climate(rng, rows)
    train_split = int(SPLIT_FRACTION * rows)
    sequence = PAST // STEP
    train = train_split - (sequence - 1) * STEP  # windows timeseries_dataset_from_array makes
    x_end = (rows - train_split) - PAST - FUTURE
    validation = x_end - (sequence - 1) * STEP
    return Data(NAME, folder, seed, scale, train, validation, arrays={"records": records},
                info={"train_split": train_split,
                      "checkpoint": folder / "model_checkpoint.weights.h5"})


def normalize(data: np.ndarray, train_split: int) -> np.ndarray:
    mean = data[:train_split].mean(axis=0)
    std = data[:train_split].std(axis=0)
    return (data - mean) / std


def _features(data: Data) -> np.ndarray:
    return normalize(data.arrays["records"][:, SELECTED], data.info["train_split"])


def _targets(data: Data) -> tuple[np.ndarray, np.ndarray]:
    """The labels of the training and the validation windows, as the example slices them."""
    features, train_split = _features(data), data.info["train_split"]
    start = PAST + FUTURE
    y_train = features[start:start + train_split, [1]]
    y_val = features[train_split + PAST + FUTURE:, [1]]
    return y_train, y_val


def inputs(data: Data) -> dict:
    """The example's two ``timeseries_dataset_from_array`` datasets."""
    features, train_split = _features(data), data.info["train_split"]
    y_train, y_val = _targets(data)
    x_train = features[:train_split]
    val_data = features[train_split:]
    x_val = val_data[:len(val_data) - PAST - FUTURE]
    sequence_length = PAST // STEP
    dataset_train = keras.utils.timeseries_dataset_from_array(
        x_train, y_train, sequence_length=sequence_length, sampling_rate=STEP,
        batch_size=BATCH)
    dataset_val = keras.utils.timeseries_dataset_from_array(
        x_val, y_val, sequence_length=sequence_length, sampling_rate=STEP, batch_size=BATCH)
    return {"train": dataset_train, "validation": dataset_val, "features": features.shape[1],
            "sequence_length": sequence_length, "checkpoint": data.info["checkpoint"]}


def build_model(inputs: dict) -> keras.Model:
    window = keras.layers.Input(shape=(inputs["sequence_length"], inputs["features"]))
    lstm_out = keras.layers.LSTM(32)(window)
    outputs = keras.layers.Dense(1)(lstm_out)
    return keras.Model(inputs=window, outputs=outputs)


def compile_args() -> dict:
    return {"optimizer": keras.optimizers.Adam(learning_rate=LEARNING_RATE), "loss": "mse"}


def callbacks(inputs: dict) -> list:
    es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)
    modelckpt_callback = keras.callbacks.ModelCheckpoint(
        monitor="val_loss", filepath=str(inputs["checkpoint"]), verbose=0,
        save_weights_only=True, save_best_only=True)
    return [es_callback, modelckpt_callback]


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], epochs=epochs, validation_data=inputs["validation"],
                     callbacks=callbacks(inputs), verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    """The validation loss of predicting the training labels' mean for every window."""
    y_train, y_val = _targets(data)
    y_train = y_train[:data.num_train]
    y_val = y_val[:data.num_validation]
    return float(np.mean((y_val - y_train.mean()) ** 2))


WORKLOAD = Workload(
    name=NAME, kind="timeseries",
    source=("https://keras.io/examples/timeseries/timeseries_weather_forecasting/",
            "https://github.com/keras-team/keras-io/blob/master/examples/timeseries/"
            "timeseries_weather_forecasting.py"),
    scaled="16,000 synthetic weather rows instead of Jena's 420,551",
    epochs=10, metric="val_loss", higher_is_better=False, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline, callbacks=callbacks)
