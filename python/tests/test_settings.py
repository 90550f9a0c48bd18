from __future__ import annotations

import pytest

from roundhouse.codec import ConfigError
from roundhouse.settings import DEFAULT_TASK_QUEUE, settings_from_env


def test_defaults_and_the_task_queue_from_the_flag_or_the_environment() -> None:
    s = settings_from_env({})
    assert (s.address, s.namespace, s.task_queue, s.tls, s.api_key) == (
        "127.0.0.1:7233",
        "default",
        DEFAULT_TASK_QUEUE,
        False,
        None,
    )
    assert settings_from_env({"ROUNDHOUSE_PYTHON_TASK_QUEUE": "judges"}).task_queue == "judges"
    assert settings_from_env({"ROUNDHOUSE_PYTHON_TASK_QUEUE": "judges"}, task_queue="flag").task_queue == "flag"


def test_an_api_key_means_tls_and_needs_an_address() -> None:
    s = settings_from_env(
        {"TEMPORAL_API_KEY": "k", "TEMPORAL_ADDRESS": "ns.tmprl.cloud:7233", "TEMPORAL_NAMESPACE": "ns"}
    )
    assert s.api_key == "k" and s.tls is not False and s.namespace == "ns"
    with pytest.raises(ConfigError, match="TEMPORAL_ADDRESS"):
        settings_from_env({"TEMPORAL_API_KEY": "k"})
    with pytest.raises(ConfigError, match="TEMPORAL_TLS: is false"):
        settings_from_env({"TEMPORAL_API_KEY": "k", "TEMPORAL_ADDRESS": "a:1", "TEMPORAL_TLS": "false"})
    with pytest.raises(ConfigError, match="TEMPORAL_TLS_KEY_PATH"):
        settings_from_env({"TEMPORAL_TLS_CERT_PATH": __file__, "TEMPORAL_ADDRESS": "a:1"})
