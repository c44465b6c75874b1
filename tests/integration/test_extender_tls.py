"""The extender's HTTPS option (ExtenderConfiguration ``listen.tls``) over a real socket on 127.0.0.1:
a client that verifies against the extender's CA (what kube-scheduler does with ``enableHTTPS: true`` and
``tlsConfig.caData``) gets answers; a client without that CA, or trusting another CA, is refused at the
handshake. Certificates come from hack/gen-extender-certs.sh (openssl), so the script is exercised too."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from extender.config import ExtenderConfiguration, load_extender_config, tls_context
from extender.server import ExtenderServer
from extender.wire import decode_host_priorities

ROOT = Path(__file__).resolve().parents[2]
ARGS = (ROOT / "tests" / "fixtures" / "extender" / "args-nodecachecapable.json").read_bytes()


def gen_certs(out: Path, *names: str) -> Path:
    subprocess.run(
        [str(ROOT / "hack" / "gen-extender-certs.sh"), str(out), *names], check=True, capture_output=True, timeout=60
    )
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return gen_certs(tmp_path_factory.mktemp("pki"), "localhost", "127.0.0.1")


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory) -> Path:
    return gen_certs(tmp_path_factory.mktemp("other-pki"), "localhost", "127.0.0.1")


def tls_config(pki: Path) -> ExtenderConfiguration:
    return load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {
                "host": "127.0.0.1",
                "port": 0,
                "tls": {"certFile": str(pki / "tls.crt"), "keyFile": str(pki / "tls.key")},
            },
        }
    )


@pytest.fixture(scope="module")
def https_server(pki):
    with ExtenderServer(tls_config(pki)) as s:
        yield s


def verifying(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def test_the_server_speaks_https_when_tls_is_configured(https_server):
    assert https_server.base_url.startswith("https://127.0.0.1:")
    assert https_server.url == https_server.base_url + "/scheduler"


def test_a_client_verifying_against_the_extenders_ca_gets_scores(https_server, pki):
    with httpx.Client(verify=verifying(pki / "ca.crt"), timeout=5) as c:
        r = c.post(https_server.url + "/prioritize", content=ARGS)
        assert r.status_code == 200
        names = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
        assert set(decode_host_priorities(r.content, names)) == set(names)
        assert c.get(https_server.base_url + "/healthz").text == "ok\n"


def test_a_client_without_the_ca_is_refused_at_the_handshake(https_server):
    with httpx.Client(verify=ssl.create_default_context(), timeout=5) as c:  # system trust store only
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            c.get(https_server.base_url + "/healthz")


def test_a_client_trusting_another_ca_is_refused_at_the_handshake(https_server, other_pki):
    with httpx.Client(verify=verifying(other_pki / "ca.crt"), timeout=5) as c:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            c.get(https_server.base_url + "/healthz")


def test_a_name_the_certificate_does_not_cover_is_refused(tmp_path, pki):
    only_other_name = gen_certs(tmp_path / "pki", "hrl-extender.example.invalid")
    with ExtenderServer(tls_config(only_other_name)) as s:
        with httpx.Client(verify=verifying(only_other_name / "ca.crt"), timeout=5) as c:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                c.get(s.base_url + "/healthz")


def test_the_probes_own_listener_speaks_https_with_the_same_certificate(pki):
    cfg = tls_config(pki).model_dump(by_alias=True)
    cfg["listen"]["healthPort"] = 0
    with ExtenderServer(ExtenderConfiguration.model_validate(cfg)) as s:
        assert s.health_url is not None and s.health_url.startswith("https://127.0.0.1:")
        with httpx.Client(verify=verifying(pki / "ca.crt"), timeout=5) as c:
            assert c.get(s.health_url + "/livez").text == "ok\n"
        with httpx.Client(timeout=5) as c, pytest.raises(httpx.HTTPError):
            c.get(s.health_url.replace("https://", "http://") + "/livez").raise_for_status()


def test_plain_http_to_the_https_port_gets_no_answer(https_server):
    with httpx.Client(timeout=5) as c:
        with pytest.raises(httpx.HTTPError):
            r = c.get(https_server.base_url.replace("https://", "http://") + "/healthz")
            r.raise_for_status()


@pytest.mark.parametrize("missing,field", [("tls.crt", "certFile"), ("tls.key", "keyFile")])
def test_a_missing_certificate_or_key_file_is_named_before_serving(tmp_path, pki, missing, field):
    cfg = tls_config(pki).model_dump(by_alias=True)
    cfg["listen"]["tls"][field] = str(tmp_path / missing)
    config = ExtenderConfiguration.model_validate(cfg)
    with pytest.raises(ValueError, match=rf"^listen\.tls\.{field}: no such file"):
        tls_context(config)


def test_a_key_that_does_not_match_the_certificate_is_refused(pki, other_pki):
    cfg = tls_config(pki).model_dump(by_alias=True)
    cfg["listen"]["tls"]["keyFile"] = str(other_pki / "tls.key")
    with pytest.raises(ValueError, match=r"^listen\.tls: cannot load certFile"):
        tls_context(ExtenderConfiguration.model_validate(cfg))


def test_tls_needs_both_files():
    from policy.config import ConfigError

    with pytest.raises(ConfigError, match=r"listen\.tls\.keyFile: required field missing"):
        load_extender_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ExtenderConfiguration",
                "listen": {"tls": {"certFile": "a.crt"}},
            }
        )


def test_the_command_exits_2_with_one_line_when_the_certificate_is_missing(tmp_path):
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{port: 0, tls: {{certFile: {tmp_path}/nope.crt, keyFile: {tmp_path}/nope.key}}}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "extender", "--config", str(cfg)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 2
    # both missing files at once, in the configuration error format of every component (issue 14)
    assert out.stderr.strip().splitlines() == [
        f"{cfg}: listen.tls.certFile: no such file (got '{tmp_path}/nope.crt')",
        f"{cfg}: listen.tls.keyFile: no such file (got '{tmp_path}/nope.key')",
    ]
