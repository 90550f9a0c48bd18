from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.service import TLSConfig

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


def test_temporals_standard_tls_names_are_read_and_win_over_the_older_names(tmp_path: Path) -> None:
    files = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca", "old-cert", "old-key", "old-ca")}
    for name, file in files.items():
        file.write_text(name.upper())
    standard = {
        "TEMPORAL_ADDRESS": "a:1",
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(files["cert"]),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(files["key"]),
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(files["ca"]),
        "TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
    }
    older = {
        "TEMPORAL_TLS_CERT_PATH": str(files["old-cert"]),
        "TEMPORAL_TLS_KEY_PATH": str(files["old-key"]),
        "TEMPORAL_TLS_CA_PATH": str(files["old-ca"]),
    }
    for env, expected in (
        (standard, (b"CERT", b"KEY", b"CA")),
        ({"TEMPORAL_ADDRESS": "a:1", **older}, (b"OLD-CERT", b"OLD-KEY", b"OLD-CA")),
        ({**older, **standard}, (b"CERT", b"KEY", b"CA")),  # both set: the standard names win
    ):
        tls = settings_from_env(env).tls
        assert isinstance(tls, TLSConfig)
        assert (tls.client_cert, tls.client_private_key, tls.server_root_ca_cert) == expected
    # The older name is not even read when the standard one is set.
    assert settings_from_env({**standard, "TEMPORAL_TLS_CA_PATH": str(tmp_path / "missing.pem")}).tls
    inline = settings_from_env(
        {
            "TEMPORAL_ADDRESS": "a:1",
            "TEMPORAL_TLS_CLIENT_CERT_DATA": "PEM-CERT",
            "TEMPORAL_TLS_CLIENT_KEY_DATA": "PEM-KEY",
        }
    ).tls
    assert isinstance(inline, TLSConfig) and (inline.client_cert, inline.client_private_key) == (
        b"PEM-CERT",
        b"PEM-KEY",
    )


def test_a_tls_setting_that_cannot_be_honoured_is_refused_by_name(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("CERT")
    with pytest.raises(
        ConfigError, match="TEMPORAL_TLS_CLIENT_KEY_PATH: mTLS needs both TEMPORAL_TLS_CLIENT_CERT_PATH"
    ):
        settings_from_env({"TEMPORAL_ADDRESS": "a:1", "TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert)})
    with pytest.raises(ConfigError, match="TEMPORAL_TLS_CLIENT_CERT_DATA: mTLS needs both"):
        settings_from_env({"TEMPORAL_ADDRESS": "a:1", "TEMPORAL_TLS_CLIENT_KEY_DATA": "KEY"})
    with pytest.raises(ConfigError, match="TEMPORAL_TLS_SERVER_CA_CERT_DATA: set either TEMPORAL_TLS_CA_PATH or"):
        settings_from_env({"TEMPORAL_TLS_CA_PATH": str(cert), "TEMPORAL_TLS_SERVER_CA_CERT_DATA": "CA"})
    with pytest.raises(ConfigError, match="TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: is true, but Roundhouse always"):
        settings_from_env({"TEMPORAL_ADDRESS": "a:1", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"})
    assert settings_from_env({"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "false"}).tls is False
