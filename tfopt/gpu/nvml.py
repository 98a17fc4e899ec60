"""NVML access: load the library lazily, classify why it is unavailable, call with fallbacks.

Everything here works with TensorFlow absent. The ``pynvml`` module (package ``nvidia-ml-py``) is
looked up in ``sys.modules``/imported on every :class:`NvmlSession` open, so tests can put a fake
module in ``sys.modules["pynvml"]`` or pass one as ``module=``. The environment never makes these
functions raise: an unusable NVML becomes an :class:`NvmlState` whose ``status`` says why.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import logging
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from tfopt.errors import GpuUnavailableError

logger = logging.getLogger("tfopt")

# NVML return codes (nvml.h). Stable across driver releases, so errors are classified by code
# rather than by pynvml's generated class names, which older pynvml versions lack.
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18


class NvmlStatus(enum.Enum):
    """Why NVML can or cannot report GPUs. Each member has a message and a hint."""

    OK = "ok"
    PYNVML_MISSING = "pynvml_missing"
    LIBRARY_MISSING = "library_missing"
    DRIVER_NOT_LOADED = "driver_not_loaded"
    VERSION_MISMATCH = "version_mismatch"
    NO_PERMISSION = "no_permission"
    NO_GPUS = "no_gpus"
    ERROR = "error"


# status -> (message, hint). One table instead of an if/elif chain; every member has an entry.
_STATUS_TEXT: dict[NvmlStatus, tuple[str, str]] = {
    NvmlStatus.OK: ("NVML is available", ""),
    NvmlStatus.PYNVML_MISSING: (
        "the Python package nvidia-ml-py (import pynvml) is not installed",
        "pip install nvidia-ml-py",
    ),
    NvmlStatus.LIBRARY_MISSING: (
        "the NVML library libnvidia-ml.so.1 was not found: no NVIDIA driver on this machine",
        "install the NVIDIA driver; in a container, start it with --gpus all "
        "(NVIDIA Container Toolkit)",
    ),
    NvmlStatus.DRIVER_NOT_LOADED: (
        "the NVIDIA kernel driver is not loaded",
        "load it (sudo modprobe nvidia) or reinstall the driver; check dmesg for errors",
    ),
    NvmlStatus.VERSION_MISMATCH: (
        "NVIDIA driver/library version mismatch: the loaded kernel module and libnvidia-ml "
        "come from different driver releases",
        "reboot (usual after a driver upgrade) or reload the nvidia kernel modules",
    ),
    NvmlStatus.NO_PERMISSION: (
        "no permission to access the NVIDIA devices",
        "check the permissions of /dev/nvidia* or run in the video group",
    ),
    NvmlStatus.NO_GPUS: (
        "the NVIDIA driver is loaded but reports no GPUs",
        "check nvidia-smi and CUDA_VISIBLE_DEVICES / container device settings",
    ),
    NvmlStatus.ERROR: ("NVML failed", "run nvidia-smi to see the driver's own message"),
}

# NVML init error code -> status. Codes not listed become NvmlStatus.ERROR.
_INIT_ERROR_STATUS = {
    ERROR_LIBRARY_NOT_FOUND: NvmlStatus.LIBRARY_MISSING,
    ERROR_DRIVER_NOT_LOADED: NvmlStatus.DRIVER_NOT_LOADED,
    ERROR_LIB_RM_VERSION_MISMATCH: NvmlStatus.VERSION_MISMATCH,
    ERROR_NO_PERMISSION: NvmlStatus.NO_PERMISSION,
}


@dataclasses.dataclass(frozen=True)
class NvmlState:
    """What NVML says about this machine as a whole.

    Attributes:
        status: Why NVML is usable or not.
        message: One line a person can read, including the library's own error text.
        hint: What to do about it; empty when status is OK.
        driver_version: The NVIDIA driver version, e.g. "550.54.15"; None when unknown.
        cuda_driver_version: The newest CUDA version the driver supports, as NVML encodes it
            (1000 * major + 10 * minor, e.g. 12040); None when unknown.
        nvml_version: The NVML library version string; None when unknown.
        device_count: Number of GPUs NVML sees.
    """

    status: NvmlStatus
    message: str
    hint: str = ""
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    nvml_version: str | None = None
    device_count: int = 0

    @property
    def ok(self) -> bool:
        """True when NVML works and sees at least one GPU."""
        return self.status is NvmlStatus.OK

    @property
    def cuda_driver_version_str(self) -> str | None:
        """The driver's CUDA version as "major.minor" (12040 -> "12.4"); None when unknown."""
        return format_cuda_version(self.cuda_driver_version)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields, status as its string value."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["cuda_driver_version"] = self.cuda_driver_version_str
        return data

    def raise_unless_ok(self) -> None:
        """Raise GpuUnavailableError with message and hint unless status is OK.

        Raises:
            GpuUnavailableError: NVML or a GPU is not available.
        """
        if not self.ok:
            raise GpuUnavailableError(f"{self.message}. Hint: {self.hint}")


def make_state(status: NvmlStatus, detail: str = "", **facts: Any) -> NvmlState:
    """Build an NvmlState with the standard message and hint of ``status``.

    Args:
        status: The status.
        detail: Extra text (e.g. the library's error) appended to the message. Defaults to "".
        **facts: Other NvmlState fields (driver_version, device_count, ...).
    """
    message, hint = _STATUS_TEXT[status]
    if detail:
        message = f"{message} ({detail})"
    return NvmlState(status=status, message=message, hint=hint, **facts)


def format_cuda_version(encoded: int | None) -> str | None:
    """Turn NVML's integer CUDA version into "major.minor".

    Example:
        >>> format_cuda_version(12040)
        '12.4'
    """
    if encoded is None:
        return None
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def error_code(error: BaseException) -> int | None:
    """The NVML return code carried by a pynvml NVMLError, or None for other exceptions."""
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    # pynvml before 11.5 returns bytes for strings; later versions return str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlSession:
    """An open NVML: initialises on first use, shuts down on close.

    NVML calls are thread-safe, so one session may serve a sampling thread and its owner. Opening
    never raises for an unusable environment; check :attr:`state`.

    Args:
        module: The pynvml module to use. Defaults to None: ``import pynvml`` at open time (a
            module placed in ``sys.modules["pynvml"]`` is used as is).

    Example:
        >>> with NvmlSession() as nvml:
        ...     if nvml.state.ok:
        ...         print([s.name for s in nvml.snapshots()])
    """

    def __init__(self, module: ModuleType | None = None):
        self._module = module
        self._state: NvmlState | None = None
        self._initialised = False
        self._handles: dict[int, Any] = {}
        self._lock = threading.RLock()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def state(self) -> NvmlState:
        """The NvmlState, initialising NVML on first access."""
        with self._lock:
            if self._state is None:
                self._state = self._open()
            return self._state

    @property
    def module(self) -> ModuleType | None:
        """The pynvml module in use, or None when it could not be imported."""
        self.state  # noqa: B018 - opens the session, which resolves the module
        return self._module

    def _open(self) -> NvmlState:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as error:
                return make_state(NvmlStatus.PYNVML_MISSING, str(error))
        nvml = self._module
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            status = _INIT_ERROR_STATUS.get(error_code(error), NvmlStatus.ERROR)
            logger.debug("nvmlInit failed: %s (code %s)", error, error_code(error))
            return make_state(status, str(error))
        except OSError as error:  # a broken libnvidia-ml can fail inside ctypes
            return make_state(NvmlStatus.LIBRARY_MISSING, str(error))
        self._initialised = True
        facts = {
            "driver_version": self._system("nvmlSystemGetDriverVersion"),
            "cuda_driver_version": self._system(
                "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"
            ),
            "nvml_version": self._system("nvmlSystemGetNVMLVersion"),
        }
        if facts["driver_version"] is not None:
            facts["driver_version"] = _text(facts["driver_version"])
        if facts["nvml_version"] is not None:
            facts["nvml_version"] = _text(facts["nvml_version"])
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as error:
            return make_state(NvmlStatus.ERROR, f"nvmlDeviceGetCount: {error}", **facts)
        if count == 0:
            return make_state(NvmlStatus.NO_GPUS, **facts)
        message = f"NVML sees {count} GPU{'s' if count != 1 else ''}"
        return NvmlState(NvmlStatus.OK, message, "", device_count=count, **facts)

    def close(self) -> None:
        """Shut NVML down if this session initialised it. Safe to call twice."""
        with self._lock:
            if self._initialised:
                self._initialised = False
                self._handles.clear()
                try:
                    self._module.nvmlShutdown()
                except self._module.NVMLError as error:
                    logger.debug("nvmlShutdown failed: %s", error)

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------

    def _system(self, *names: str) -> Any:
        return self.call(names)

    def call(self, names: Sequence[str] | str, *args: Any, **kwargs: Any) -> Any:
        """Call the first NVML function in ``names`` that this pynvml and driver provide.

        Newer NVML names come first; a name pynvml lacks (AttributeError) or the driver lacks
        (NVML_ERROR_FUNCTION_NOT_FOUND) falls through to the next. A field the GPU does not support
        (NVML_ERROR_NOT_SUPPORTED) or any other NVML error gives None, logged at debug level:
        monitoring must go on when one field is missing.

        Args:
            names: Function names, newest first (a single name is allowed).
            *args: Positional arguments for the function (usually the device handle).
            **kwargs: Keyword arguments for the function.

        Returns:
            The function's result, or None when no name worked.
        """
        if isinstance(names, str):
            names = (names,)
        # During _open the module is already resolved; elsewhere, opening resolves it.
        nvml = self._module if self._module is not None else self.module
        if nvml is None:
            return None
        for name in names:
            function = getattr(nvml, name, None)
            if function is None:
                continue
            try:
                return function(*args, **kwargs)
            except TypeError as error:  # an older pynvml whose signature lacks a new argument
                logger.debug("%s: %s", name, error)
                continue
            except nvml.NVMLError as error:
                if error_code(error) == ERROR_FUNCTION_NOT_FOUND:
                    continue
                logger.debug("%s: %s", name, error)
                return None
        return None

    def handle(self, index: int) -> Any:
        """The NVML device handle of GPU ``index``, cached; None when it cannot be had.

        Args:
            index: The GPU index, 0 <= index < state.device_count.
        """
        if not self.state.ok:
            return None
        if index not in self._handles:
            handle = self.call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return None
            self._handles[index] = handle
        return self._handles[index]

    def snapshots(self) -> list:
        """A GpuSnapshot of every GPU, in index order; [] when NVML is not usable."""
        from tfopt.gpu.snapshot import read_snapshot  # snapshot imports this module

        if not self.state.ok:
            return []
        return [read_snapshot(self, index) for index in range(self.state.device_count)]


def nvml_state(module: ModuleType | None = None) -> NvmlState:
    """Probe NVML once: initialise, read the system facts, shut down.

    Args:
        module: The pynvml module. Defaults to None: import pynvml.

    Returns:
        The NvmlState; never raises for an unusable environment.

    Example:
        >>> state = nvml_state()
        >>> state.status in NvmlStatus
        True
    """
    with NvmlSession(module) as session:
        return session.state


def gpu_snapshots(module: ModuleType | None = None) -> tuple[NvmlState, list]:
    """Read every GPU once.

    Args:
        module: The pynvml module. Defaults to None: import pynvml.

    Returns:
        (state, snapshots): snapshots is [] unless state.ok.

    Example:
        >>> state, snapshots = gpu_snapshots()
    """
    with NvmlSession(module) as session:
        return session.state, session.snapshots()
