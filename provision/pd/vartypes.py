"""The type of every PD inventory var, checked when the deployment is planned (``spec.build``): by
``pd up`` and by ``run`` of a playbook with ``pd_validate`` on the inventory alone, before any host is touched
(exit 5), and by the PD modules. A value of the wrong type is one line naming the host and the var; it is
never turned into a string and used on a host (``pd_dir: 5`` created ``~/5/logs``; ``ucx_tls: 5`` crashed).

Every var may be unset or null (its default then). Numbers may be given as text (INI inventories have only
text); booleans are never numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .flags import PlanError

PATHS = ("venv_path", "pd_dir", "pd_pid_dir", "pd_compat_dir", "pd_tiny_model_dir", "pd_cpu_model_path", "model_path")
TEXTS = ("sglang_device", "router_policy", "kv_cache_dtype", "pd_nixl_backend", "server_bind_host", "router_bind_host",
         "pd_host_ip", "hf_token", "pd_supervisor", "pd_instance")  # fmt: skip
INTEGERS = ("server_port", "bootstrap_port", "router_port", "router_prometheus_port", "tp", "dp", "base_gpu_id",
            "page_size", "cpu_max_total_tokens", "router_health_failure_threshold", "pd_start_limit_burst",
            "nccl_port", "dist_init_port")  # fmt: skip
SECONDS = ("router_health_check_interval", "router_health_check_timeout", "pd_restart_delay", "pd_restart_max_delay",
           "pd_start_limit_interval", "pd_stop_timeout", "pd_instance_grace", "pd_transfer_timeout",
           "pd_server_timeout")  # fmt: skip
WORDS = ("sglang_extra_args", "router_extra_args", "sglang_server_cmd", "sglang_router_cmd")  # text or a list
NAMES = ("ucx_tls", "ucx_net_devices")  # "a,b" or a list of names
MAPPINGS = ("pd_env",)
# true/false (or their words: yes/no, "true"/"false" from a template)
BOOLEANS = ("pd_metrics", "pd_instance_one_machine", "pd_serial_start")


TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def says_yes(value: Any) -> bool:
    """A var that says yes: true, or a string such as "true"/"yes"/"1" (as a rendered template gives)."""
    return value is True or (isinstance(value, str) and value.strip().lower() in TRUE_WORDS)


def says_no(value: Any) -> bool:
    """A var that says no: false, or a string such as "false"/"no"/"0" (as a rendered template gives)."""
    return value is False or (isinstance(value, str) and value.strip().lower() in FALSE_WORDS)


def _bool(value: Any) -> bool:
    return says_yes(value) or says_no(value)


def _path(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != "" and not any(c in value for c in "\0\n\r")


def _text(value: Any) -> bool:
    return isinstance(value, str) and "\0" not in value


def _integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20


def _seconds(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        number = float(value) if isinstance(value, (int, float, str)) else math.nan
    except ValueError:
        return False
    return math.isfinite(number) and number >= 0


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and "\0" not in str(value)


def _words(value: Any) -> bool:
    return _text(value) or (isinstance(value, list) and all(_scalar(v) for v in value))


def _names(value: Any) -> bool:
    return _text(value) or (isinstance(value, list) and all(_text(v) for v in value))


_KINDS: dict[tuple[str, ...], tuple[Callable[[Any], bool], str]] = {
    PATHS: (_path, "not a path (text)"),
    TEXTS: (_text, "not text"),
    INTEGERS: (_integer, "not an integer"),
    SECONDS: (_seconds, "not a number of seconds"),
    WORDS: (_words, "not a command line (text, or a list of words)"),
    NAMES: (_names, "not a list of names (text 'a,b' or a list)"),
    MAPPINGS: (lambda v: isinstance(v, Mapping), "not a mapping"),
    BOOLEANS: (_bool, "not true or false"),
}
TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {name: kind for names, kind in _KINDS.items() for name in names}


def check(host: str, variables: Mapping[str, Any]) -> None:
    """PlanError naming the first PD var of ``host`` whose value has the wrong type."""
    for name, (ok, what) in TYPES.items():
        value = variables.get(name) if name in variables else None
        if value is not None and not ok(value):
            shown = "a " + type(value).__name__ if name == "hf_token" else repr(value)[:60]  # a secret: no value
            raise PlanError(f"{host}: {name}={shown} is {what}")
